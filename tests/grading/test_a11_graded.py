"""Assignment 11 through the real pipeline (``grade_course``): the sandboxed kernel and the
judge. Task 2 hands the student's ``ring_attention`` the grader's own merge (a function of
the hidden checks, called from the kernel across the judge's channel), which records each
call; this shows that the handle crosses and that the points follow the merges it saw:

- ``alice`` (committed sample): correct, in Paddle: 6 + 6;
- ``bob`` (committed sample): a merge that overflows; his ring is graded with the grader's
  merge, so only task 1 loses: 4 + 6;
- ``eve`` (made here): the reference merge, and a ring_attention that concatenates the
  blocks into one softmax (issue 37.2): right numbers, no merge called: 6 + 0, the cell's
  feedback naming it.

Needs root and bubblewrap (skipped without them, failed when ``CI`` is set)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.grading.config import SandboxConfig
from grader.grading.sandbox import setup
from tests.checks import a11_solutions as sol

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"
A = "a11_ring_attention"


def _outputs(course: Path, student: str, cell: str) -> str:
    nb = nbformat.read(course / "autograded" / student / A / f"{A}.ipynb", as_version=4)
    c = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell)
    return "\n".join(o.get("text", "") or str(o.get("evalue", "")) for o in c.get("outputs", []))


@pytest.fixture(scope="module")
def graded():
    problem = setup.check(SandboxConfig())
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    from grader.grading.run.pipeline import grade_course

    course = Path(tempfile.mkdtemp(prefix="a11-course-"))
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    shutil.copytree(EXERCISES / "source" / A, course / "source" / A)
    for student in ("alice", "bob"):
        shutil.copytree(EXERCISES / "submitted" / student / A, course / "submitted" / student / A)
    nb = nbformat.read(EXERCISES / "submitted" / "bob" / A / f"{A}.ipynb", as_version=4)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid == "merge":
            c.source = sol.MERGE_LOGADDEXP.strip("\n")
        if gid == "ring_attention":
            c.source = sol.RING_CONCAT.strip("\n")
    (course / "submitted" / "eve" / A).mkdir(parents=True)
    nbformat.write(nb, course / "submitted" / "eve" / A / f"{A}.ipynb")
    run = grade_course(course, cell_timeout=120, notebook_timeout=600, memory_gb=4.0,
                       workers=1, verbose=False)
    yield course, {o.student: o for o in run.outcomes}
    shutil.rmtree(course, ignore_errors=True)


@pytest.mark.parametrize("student, merge_points, ring_points",
                         [("alice", 6, 6), ("bob", 4, 6), ("eve", 6, 0)])
def test_the_ring_is_paid_only_for_the_merges_the_grader_saw(graded, student, merge_points,
                                                              ring_points):
    course, outcomes = graded
    o = outcomes[student]
    assert o.status == "graded", o
    assert (o.cells["test_merge"][0], o.cells["test_ring"][0]) == (merge_points, ring_points), \
        (o, _outputs(course, student, "test_ring"))
    if student == "eve":
        assert "called merge 0 times" in _outputs(course, student, "test_ring")
