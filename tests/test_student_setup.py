"""The set-up cell of a notebook downloaded from the book: it installs the course's wheel,
which the build publishes next to the notebooks, where ``grader`` is missing."""
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.grading.student import student_version
from grader.student_setup import (HANDIN_ID, build_wheel, setup_cell, wheel_name, with_handin_cell,
                                  with_setup_cell)

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "exercises" / "source"
ASSIGNMENTS = sorted(p.name for p in SOURCE.iterdir() if p.is_dir())


def test_a_published_notebook_starts_with_the_set_up_cell_which_is_quiet_where_grader_is_installed(tmp_path):
    wheel = wheel_name(ROOT)
    assert re.fullmatch(r"pdl_course-[\d.]+-py3-none-any\.whl", wheel)
    nb = with_setup_cell(student_version(nbformat.read(SOURCE / ASSIGNMENTS[0] / f"{ASSIGNMENTS[0]}.ipynb",
                                                       as_version=4)), wheel, "https://book.example.org/")
    assert nb.cells[0].cell_type == "markdown" and nb.cells[1].id == "course-setup"
    src = nb.cells[1].source
    assert wheel in src and 'BOOK = "https://book.example.org"' in src
    assert max(len(line) for line in src.splitlines()) <= 88
    nbformat.validate(nb)
    done = subprocess.run([sys.executable, "-c", src], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "course package: 0.1.0", done.stderr
    assert "installing" not in done.stdout


def test_a_published_notebook_ends_with_how_to_hand_it_in_which_nothing_runs_when_graded():
    name = ASSIGNMENTS[0]
    nb = with_handin_cell(student_version(nbformat.read(SOURCE / name / f"{name}.ipynb",
                                                        as_version=4)), name)
    last = nb.cells[-1]
    assert last.id == HANDIN_ID and last.cell_type == "markdown" and "nbgrader" not in last.metadata
    assert f"python -m grader.handin {name} --student YOUR_ID" in last.source
    assert "Save" in last.source and "newest one counts" in last.source
    nbformat.validate(nb)


@pytest.mark.slow
def test_the_set_up_cell_installs_the_published_wheel_where_grader_is_missing(tmp_path):
    """A fresh virtual environment (no course package): from the wheel in the notebook's
    folder, then from the book's address; without either, an error saying what to do.
    (Dependencies are not installed here, ``PIP_NO_DEPS``: they are PyTorch and Paddle.)"""
    book = tmp_path / "book"
    wheel = build_wheel(ROOT, book / "exercises", tmp_path / "cache")
    assert wheel.name == wheel_name(ROOT) and wheel.stat().st_size > 10_000
    again = build_wheel(ROOT, tmp_path / "again", tmp_path / "cache")     # from the cache
    assert again.read_bytes() == wheel.read_bytes()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_NO_DEPS="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")

    def venv(name: str) -> str:
        base = Path(sys.base_prefix) / "bin" / "python3"
        subprocess.run([str(base), "-m", "venv", str(tmp_path / name)], check=True, timeout=300)
        return str(tmp_path / name / "bin" / "python")

    def run(python: str, cell: str, folder: Path) -> subprocess.CompletedProcess:
        folder.mkdir(exist_ok=True)
        return subprocess.run([python, "-c", cell], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=600)

    # 1. the wheel saved next to the notebook
    python = venv("one")
    here = tmp_path / "notebooks"
    here.mkdir()
    (here / wheel.name).write_bytes(wheel.read_bytes())
    cell = setup_cell(wheel.name, framework="").source      # the package alone
    first = run(python, cell, here)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "installing the course package (with NumPy and Matplotlib) from" in first.stdout
    assert first.stdout.strip().endswith("course package: 0.1.0")
    where = run(python, "import grader; print(grader.__file__)", here).stdout
    assert str(tmp_path / "one") in where                     # the fresh environment's copy
    second = run(python, cell, here)
    assert "installing" not in second.stdout and second.stdout.strip() == "course package: 0.1.0"

    # 2. nothing in the folder, but the book's address is known: fetched from there
    python = venv("two")
    fetched = run(python, setup_cell(wheel.name, book.as_uri(), framework="").source,
                  tmp_path / "empty")
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    assert f"from {book.as_uri()}/exercises/{wheel.name}" in fetched.stdout

    # 3. neither: the error says where to get the wheel and where to put it
    python = venv("three")
    lost = run(python, cell, tmp_path / "elsewhere")
    assert lost.returncode != 0 and "download it from the book's exercises page" in lost.stderr


def test_the_set_up_cell_installs_the_notebooks_framework_only_and_pinned():
    from grader.student_setup import notebook_framework

    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().split()
                if "==" in line)
    torch_cell = setup_cell("w.whl", framework="torch").source
    assert f'"torch": "torch=={pins["torch"]}"' in torch_cell
    assert f'"paddle": "paddlepaddle=={pins["paddlepaddle"]}"' in torch_cell
    assert 'DEFAULT = "torch"' in torch_cell and "download.pytorch.org/whl/cpu" in torch_cell
    assert 'DEFAULT = ""' in setup_cell("w.whl", framework="").source
    for name in ASSIGNMENTS:
        nb = nbformat.read(SOURCE / name / f"{name}.ipynb", as_version=4)
        fw = notebook_framework(nb)
        assert fw in ("torch", "paddle", ""), name
        src = "\n".join(c.source for c in nb.cells)
        if 'FRAMEWORK = "torch"' in src:
            assert fw == "torch", name


def test_the_wheel_asks_for_no_framework_and_admits_python_3_12():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith(("torch", "paddle"))]
    assert set(project["optional-dependencies"]) >= {"torch", "paddle"}
    from packaging.specifiers import SpecifierSet
    assert {"3.11", "3.12"} <= {v for v in ("3.10", "3.11", "3.12")
                                 if v + ".0" in SpecifierSet(project["requires-python"])}


_FAKE_PIP = '''\
import json, os, sys
with open(os.environ["FAKE_PIP_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
'''

_SHELL = '''\
import json, sys
sys.modules["torch"] = sys.modules["paddle"] = None   # a student's Python without either
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for cell in json.loads(sys.argv[1]):
    result = shell.run_cell(cell)
    print("CELL-DONE", result.success, flush=True)
'''


@pytest.mark.parametrize("chosen", ["torch", "paddle"])
def test_the_set_up_cell_installs_the_framework_the_answers_choose_not_the_default(chosen, tmp_path):
    """A notebook published with FRAMEWORK = "torch" in its first answer cell, answered in
    Paddle: the set-up cell (run first, before the student's choice) installs nothing yet,
    and the framework the answer cell names is installed right after that cell has run,
    the other never. ``pip`` is a stand-in that records what it was asked to install;
    IPython is a real shell."""
    nb = nbformat.read(SOURCE / "a1_independent_ops" / "a1_independent_ops.ipynb", as_version=4)
    nb = with_setup_cell(student_version(nb), "w.whl")
    setup = next(c for c in nb.cells if c.get("id") == "course-setup").source
    fake = tmp_path / "fake"
    (fake / "pip").mkdir(parents=True)
    (fake / "pip" / "__init__.py").write_text("")
    (fake / "pip" / "__main__.py").write_text(_FAKE_PIP)
    log = tmp_path / "pip.log"
    log.touch()
    answer = f'FRAMEWORK = "{chosen}"\nprint("answered in", FRAMEWORK)'
    cells = [setup, "print('between')", answer, "print('after')"]
    done = subprocess.run([sys.executable, "-c", _SHELL, __import__("json").dumps(cells)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=f"{fake}:{ROOT}",
                                   FAKE_PIP_LOG=str(log)))
    assert done.returncode == 0 and done.stdout.count("CELL-DONE True") == 4, done.stdout + done.stderr
    before, _, after = done.stdout.partition("answered in")
    assert "installing" not in before                 # nothing before the student chose
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().split()
                if "==" in line)
    pin = {"torch": f"torch=={pins['torch']}", "paddle": f"paddlepaddle=={pins['paddlepaddle']}"}
    other = "paddle" if chosen == "torch" else "torch"
    installs = log.read_text().splitlines()
    assert len(installs) == 1 and pin[chosen] in installs[0] and pin[other] not in installs[0]
    assert f"installing {pin[chosen]}" in after and "MB installed" in after
