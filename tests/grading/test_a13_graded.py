"""Assignment 13 through the real pipeline (``grade_course``): the sandboxed kernel runs the
students' functions, which hand back data; the confined judge builds and steps each layout
itself on one rank of a fake process group (torch.distributed's ``fake`` backend, in the
judge's own process, no network) and measures it. The committed samples:

- ``alice``: correct, in Paddle's words (fleet's hybrid_configs): 6 + 4;
- ``bob``: Adam's two moments counted as one: 5 + 1 (his choose_layout trusts his figures
  and picks layouts over the budget), the feedback of both cells naming the moments;
- ``carol``: the released notebook: 0 + 0.

Needs root and bubblewrap (skipped without them, failed when ``CI`` is set)."""
from __future__ import annotations

import shutil

import pytest

from tests.grading import graded_course

pytestmark = pytest.mark.slow

A = "a13_composed_layout"


@pytest.fixture(scope="module")
def graded():
    graded_course.need_sandbox()
    from grader.grading.run.pipeline import grade_course

    course = graded_course.make(A, ("alice", "bob", "carol"), {})
    run = grade_course(course, cell_timeout=120, notebook_timeout=600, memory_gb=4.0,
                       workers=1, verbose=False)
    yield course, {o.student: o for o in run.outcomes}
    shutil.rmtree(course, ignore_errors=True)


@pytest.mark.parametrize("student, memory, layout", [("alice", 6, 4), ("bob", 5, 1),
                                                     ("carol", 0, 0)])
def test_the_judge_builds_the_layouts_and_pays_what_it_measured(graded, student, memory,
                                                                 layout):
    course, outcomes = graded
    o = outcomes[student]
    assert o.status == "graded", o
    text = graded_course.outputs(course, A, student, "test_predict_memory")
    assert (o.cells["test_predict_memory"][0], o.cells["test_choose_layout"][0]) == \
        (memory, layout), (o, text)
    if student == "bob":
        assert "two moments" in text, text
        chosen = graded_course.outputs(course, A, student, "test_choose_layout")
        assert "your predict_memory gives stage" in chosen and "two moments" in chosen, chosen
