"""Graded classes shared by several test modules, each graded ONCE per session through the
real path (``grade_course``, what ``make grade`` runs: sandbox, judge, feedback).

``hostile_class``: assignment 1 of alice and bob beside every attack of
tests/grading/attacks/hostile.py and mallory (alice's answers plus the script payloads of
tests/grading/payloads.py), under the small limits of ``hostile.COURSE_TOML``, two workers;
and alice and bob graded alone under the same limits. Its users: tests/grading/test_attacks.py
(each attack blocked, alice and bob as when graded alone) and
tests/grading/submission/test_feedback_browser.py (mallory's feedback page in Chromium).
A new hostile or honest case goes into :func:`_hostile_course` (a student of its own); the
tests then read its outcome with ``run.find(student, assignment)``.

Tests that need a class of a different shape keep their own: test_identity.py (ONE worker,
so that successive students share a slot), test_judge_confined.py (the course's default
limits, assignment 7, the course folder as working directory with planted torch.py and
paddle.py), the ledger and parallel tests (machines killed mid-run: nothing shared with
them), test_paddle_judged.py and test_attacks.py's judged comparison (nbgrader run directly
with the judged and the in-kernel executors)."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from tests.grading import payloads
from tests.grading.attacks import hostile

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"
A1 = "a1_independent_ops"
HONEST = ("alice", "bob")


@pytest.fixture(scope="session")
def listener():
    """A local HTTP listener whose URL mallory's payloads call (session-wide: the payloads
    are written into the shared class before it is graded)."""
    lst = payloads.Listener()
    yield lst
    lst.close()


def _hostile_course(attacks: bool, listener_url: str) -> Path:
    course = Path(tempfile.mkdtemp(prefix="hostile-"))
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    (course / "course.toml").write_text(hostile.COURSE_TOML)
    shutil.copytree(EXERCISES / "source" / A1, course / "source" / A1)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    for s in HONEST:
        shutil.copytree(EXERCISES / "submitted" / s / A1, course / "submitted" / s / A1)
    if attacks:
        hostile.build(course)
        # mallory: alice's correct answers plus every script payload (test_feedback_browser)
        nb = nbformat.read(EXERCISES / "submitted" / "alice" / A1 / f"{A1}.ipynb", as_version=4)
        nb.cells += payloads.cells(listener_url)
        (course / "submitted" / "mallory" / A1).mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / "mallory" / A1 / f"{A1}.ipynb")
    return course


@pytest.fixture(scope="session")
def hostile_class(listener):
    """(the run with the attacks and mallory, alice and bob graded alone, the attacks' course,
    the temporary folder the runs used: TMPDIR, where grading keeps its runtime folders)."""
    from grader.grading.run.pipeline import grade_course

    scratch = Path(tempfile.mkdtemp(prefix="hostile-tmp-"))
    course, alone = _hostile_course(True, listener.url), _hostile_course(False, listener.url)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(scratch))
        mp.setattr(tempfile, "tempdir", str(scratch))
        run = grade_course(course, workers=2, verbose=False)
        solo = grade_course(alone, workers=2, verbose=False)
    yield run, solo, course, scratch
    for p in (course, alone, scratch):
        shutil.rmtree(p, ignore_errors=True)
