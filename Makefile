# Two set-up commands for a fresh machine with Python 3.11 and pip:
#   make book   -> virtual environment + install + executed HTML book in _build/html
#   make test   -> same environment, runs the test suite
# Every version is pinned in constraints.txt; nothing is installed outside .venv except,
# for the browser tests, Debian's chromium and chromium-driver (see `browser-deps`).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# GPU=1 installs paddlepaddle-gpu instead of the CPU wheel (see README, "GPU machines").
GPU    ?= 0
PADDLE_GPU_INDEX ?=
PYTEST_ARGS ?=
# make test and test-fast share TEST_PROCS processes (pytest-xdist; how: tests/groups.py);
# TEST_PROCS=0 runs the tests in one process.
TEST_PROCS ?= 2
XDIST := $(if $(filter 0,$(TEST_PROCS)),,-n $(TEST_PROCS) --dist loadgroup --no-loadscope-reorder)

.PHONY: help install bytecode book test test-fast bench gpu-check browser-deps grade-deps slurm-deps lock clean clean-book grade collect hub hub-deps sandbox-deps

help:
	@echo "make book   build the executed HTML book into _build/html"
	@echo "make test   run the test suite (book build and browser checks included)"
	@echo "make bench  print build times, the CPU two-worker speedup and the class grading ratio"
	@echo "make collect ASSIGNMENT=... FROM=...  collect hand-ins downloaded from the platform"
	@echo "make grade  grade exercises/submitted/ (sandboxed, parallel, resumable; exercises/course.toml)"
	@echo "make hub    run the course's JupyterHub on http://127.0.0.1:$(HUB_PORT) with demo accounts"

$(STAMP): pyproject.toml constraints.txt
	@test -x "$(PY)" || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=23.2"
	$(PY) -m pip install --quiet -c constraints.txt -e ".[torch,paddle,book,grading,dev,hub]"
ifeq ($(GPU),1)
	$(PY) -m pip uninstall --yes paddlepaddle
	$(PY) -m pip install --quiet paddlepaddle-gpu==$$(grep '^paddlepaddle==' constraints.txt | cut -d= -f3) $(if $(PADDLE_GPU_INDEX),-i $(PADDLE_GPU_INDEX))
endif
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)" >/dev/null
	@touch $(STAMP)

install: $(STAMP)

# the grader package's bytecode, written where missing or stale (a few ms when up to date):
# every kernel, rank, worker and judge imports grader, and where PYTHONDONTWRITEBYTECODE is
# set (as on the machine this course is built and tested on) each would compile it again
bytecode: $(STAMP)
	@$(PY) -m compileall -q grader

book: $(STAMP) bytecode
	$(PY) -m grader.build

test: $(STAMP) bytecode browser-deps hub-deps grade-deps slurm-deps
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

test-fast: $(STAMP) bytecode
	$(PY) -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/cpu_workers.py
	$(PY) bench/book_build.py
	$(PY) bench/grading_class.py --quiet

# Autograde everything in exercises/submitted/ (grades: exercises/reports/grades.csv,
# feedback: exercises/feedback/). GRADE_ARGS e.g. "--student alice --cell-timeout 30".
GRADE_ARGS ?=
grade: $(STAMP) sandbox-deps
	$(PY) -m grader.grading --course exercises $(GRADE_ARGS)

# Collect the hand-ins of one assignment downloaded from the course's platform: FROM is the
# platform's download, a folder per student id with their uploads inside (or give ROSTER, a
# CSV mapping files to students); whose and when come from there, never from the zips
# (exercises/GRADING.md, "Hand-ins by zip"). Then `make grade`.
ASSIGNMENT ?=
FROM ?=
ROSTER ?=
collect: $(STAMP)
	@test -n "$(ASSIGNMENT)" || { echo "make collect needs ASSIGNMENT=<assignment> and FROM=<the platform's download folder> (see exercises/GRADING.md)"; exit 2; }
	@if [ -n "$(FROM)" ]; then test -d "$(FROM)" || { echo "make collect: FROM=$(FROM) is not a folder"; exit 2; }; \
	  mkdir -p "exercises/downloaded/$(ASSIGNMENT)" && cp -Rp "$(FROM)"/. "exercises/downloaded/$(ASSIGNMENT)/"; fi
	$(PY) -m grader.grading.submission.collect $(ASSIGNMENT) $(if $(ROSTER),--roster "$(ROSTER)")

# What grading itself needs: Debian's bubblewrap (the kernels' sandbox, exercises/GRADING.md).
sandbox-deps:
	@if command -v bwrap >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's bubblewrap for grading"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null) \
	  || echo "could not install bubblewrap; grading will stop and say what to do"; \
	else echo "bubblewrap missing: run 'sudo apt-get install --no-install-recommends bubblewrap' (grading runs as root)"; fi

gpu-check: $(STAMP)
	$(PY) -m grader.gpu_check

# Debian's chromium + chromium-driver drive the browser tests. Installed only when missing,
# and only where apt-get can run (root); elsewhere the README says what to install.
browser-deps:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's chromium and chromium-driver for the browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	  || echo "could not install chromium; browser tests will fail with instructions"; \
	else echo "chromium/chromedriver missing: run 'sudo apt-get install chromium chromium-driver' for the browser tests"; fi

# Grading: Debian's postgresql (the tests start a real server for the PostgreSQL gradebook
# and the grading ledger) and bubblewrap (the students' kernels run in a bwrap sandbox).
# Installed only when missing, and only where apt-get can run (root).
grade-deps:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v bwrap >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's postgresql and bubblewrap for grading and its tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql bubblewrap >/dev/null) \
	  || echo "could not install postgresql/bubblewrap; the grading tests will fail with instructions"; \
	else echo "postgresql or bubblewrap missing: run 'sudo apt-get install --no-install-recommends postgresql bubblewrap' for grading and its tests"; fi

# A real one-node Slurm for the tests of the chapters' batch scripts (Debian's slurmctld,
# slurmd, slurm-client and munge; tests/chapters/scripts/_slurm.py starts them with a
# private configuration and stops them). Installed only when missing, and only as root;
# elsewhere those tests skip, saying what to install.
slurm-deps:
	@if command -v sbatch >/dev/null && [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/munged ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's slurmctld, slurmd, slurm-client and munge for the batch-script tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null) \
	  || echo "could not install Slurm; the real-Slurm tests will skip, saying so"; \
	else echo "Slurm missing: run 'sudo apt-get install --no-install-recommends slurmctld slurmd slurm-client munge' for the real-Slurm tests (they need root)"; fi

# The course hub (README, "JupyterHub"): JupyterHub from .venv, its proxy
# (configurable-http-proxy, pinned in package-lock.json) from the npm registry into
# node_modules/. Node.js and npm come from Debian when missing (as root).
HUB_PORT ?= 8000
HUB_ARGS ?=
NODE_STAMP := node_modules/.installed

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's nodejs and npm for the hub's proxy"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; \
	  else echo "npm missing: run 'sudo apt-get install nodejs npm' for the course hub"; exit 1; fi; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

hub-deps: $(STAMP) $(NODE_STAMP)

hub: hub-deps
	$(PY) -m hub.run --port $(HUB_PORT) $(HUB_ARGS)

# Regenerate constraints.txt from the current environment (maintainers only).
lock: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+cpu/torch==\1/' > constraints.txt

clean-book:
	rm -rf _build/html _build/.doctrees

clean: clean-book
	rm -rf _build $(VENV)
