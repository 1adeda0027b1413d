"""A class whose workers cannot grade stops with the reason, instead of starting workers
again and again (grader/grading/run/pipeline.py): the sandbox's tools missing is decided once,
by the grading process, before any worker starts; a worker that exits with an error before
grading anything, in every slot, ends the run with the last line of its log."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.grading.run.pipeline import grade_course

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A1 = "a1_independent_ops"

pytestmark = pytest.mark.slow


def _course(root: Path) -> Path:
    course = root / "course"
    course.mkdir()
    for f in ("nbgrader_config.py", "course.toml"):
        shutil.copy(EXERCISES / f, course)
    shutil.copytree(EXERCISES / "source" / A1, course / "source" / A1)
    shutil.copytree(EXERCISES / "submitted" / "alice" / A1, course / "submitted" / "alice" / A1)
    return course


def test_missing_sandbox_tools_stop_grading_at_once_with_what_to_do(tmp_path, monkeypatch):
    course = _course(tmp_path)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))   # no bwrap, setpriv or prlimit
    with pytest.raises(RuntimeError) as e:
        grade_course(course, sandbox="bwrap", verbose=False)
    assert "not installed, so student code cannot be isolated" in str(e.value)
    assert "make grade-deps" in str(e.value)
    assert not list((course / "reports" / "logs").glob("worker-*.log"))   # none was started
    assert not (course / "reports" / "grades.csv").exists()


def test_workers_that_all_fail_to_start_end_the_run_with_their_reason(tmp_path, monkeypatch):
    course = _course(tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    # every grading worker (and nothing else: the test's own process has started already)
    # exits at start-up, as a worker on a broken installation does
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "if '--slot' in sys.argv:\n"
        "    raise SystemExit('this worker cannot start: a broken installation')\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    with pytest.raises(RuntimeError) as e:
        grade_course(course, sandbox="none", workers=1, verbose=False)
    msg = str(e.value)
    assert "every grading worker stopped with an error" in msg and "exit codes 1" in msg, msg
    assert "worker-0.log ends:" in msg and "this worker cannot start: a broken installation" in msg, msg
    # started once, not again and again: one start's line in its log
    log = (course / "reports" / "logs" / "worker-0.log").read_text()
    assert log.count("SystemExit: this worker cannot start") == 1, log
