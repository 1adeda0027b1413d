"""Assignment 11 through the real pipeline (``grade_course``): the sandboxed kernel and the
judge. Task 2 hands the student's ``ring_attention`` the grader's own merge (a function of
the hidden checks, called from the kernel across the judge's channel), which records each
call; this shows that the handle crosses and that the points follow the merges it saw:

- ``alice`` (committed sample): correct, in Paddle: 6 + 6;
- ``bob`` (committed sample): a merge that overflows; his ring is graded with the grader's
  merge, so only task 1 loses: 4 + 6;
- ``eve`` (made here): the reference merge, and a ring_attention that concatenates the
  blocks into one softmax (issue 37.2): right numbers, no merge called: 6 + 0, the cell's
  feedback naming it;
- ``mallory`` (made here): the reference merge, and a ring that merges block after block but
  computes the whole score matrix once beside it (issue 37.2): the kernel's control group,
  read by the judge, shows the call's peak: 6 + 4, the cell's feedback naming the peak.

Needs root and bubblewrap (skipped without them, failed when ``CI`` is set)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.checks import a11_solutions as sol
from tests.grading import graded_course

pytestmark = pytest.mark.slow

A = "a11_ring_attention"


def _outputs(course: Path, student: str, cell: str) -> str:
    return graded_course.outputs(course, A, student, cell)


@pytest.fixture(scope="module")
def graded():
    graded_course.need_sandbox()
    from grader.grading.run.pipeline import grade_course

    eve = graded_course.sample("bob", A, {"merge": sol.MERGE_LOGADDEXP.strip("\n"),
                                         "ring_attention": sol.RING_CONCAT.strip("\n")})
    mallory = graded_course.sample("bob", A, {"merge": sol.MERGE_LOGADDEXP.strip("\n"),
                                             "ring_attention": sol.RING_WHOLE_SCORES.strip("\n")})
    course = graded_course.make(A, ("alice", "bob"), {"eve": eve, "mallory": mallory})
    run = grade_course(course, cell_timeout=120, notebook_timeout=600, memory_gb=4.0,
                       workers=1, verbose=False)
    yield course, {o.student: o for o in run.outcomes}
    shutil.rmtree(course, ignore_errors=True)


@pytest.mark.parametrize("student, merge_points, ring_points",
                         [("alice", 6, 6), ("bob", 4, 6), ("eve", 6, 0), ("mallory", 6, 4)])
def test_the_ring_is_paid_only_for_the_merges_the_grader_saw(graded, student, merge_points,
                                                              ring_points):
    course, outcomes = graded
    o = outcomes[student]
    assert o.status == "graded", o
    assert (o.cells["test_merge"][0], o.cells["test_ring"][0]) == (merge_points, ring_points), \
        (o, _outputs(course, student, "test_ring"))
    if student == "eve":
        assert "called merge 0 times" in _outputs(course, student, "test_ring")
    if student == "mallory":
        text = _outputs(course, student, "test_ring")
        assert "more than one block's scores" in text and "the kernel's control group" in text, text
