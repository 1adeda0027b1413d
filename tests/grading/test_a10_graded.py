"""Assignment 10 through the real pipeline (``grade_course``, what ``make grade`` runs): the
sandboxed kernel, the judge, and each rank in a sandbox of its own talking to its relay. One
small class, graded once:

- ``alice`` (committed sample): correct, in Paddle: 4 + 6;
- ``dan`` (made here): the notebook's reference f and g, and an alternative tp_mlp in PyTorch
  (slices, ``dist.all_reduce`` called directly in place of g): 4 + 6;
- ``bob`` (committed sample): f's backward without the all-reduce, b2 inside g: 3 + 3, each
  test cell's feedback naming its mistake;
carol's sample (f and g as released, the whole MLP on every rank: 0 + 0) is left to
``tests/checks/test_a10_tensor_parallel.py`` (``f_g_as_released``, ``mlp_all_local``): each
notebook here costs four launches of the ranks.

Needs root and bubblewrap (skipped without them, failed when ``CI`` is set)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.checks import a10_solutions as sol
from tests.checks.notebooks import reference
from tests.checks.samples_a10 import SCORES
from tests.grading import graded_course

pytestmark = pytest.mark.slow

A = "a10_tensor_parallel"


def _outputs(course: Path, student: str, cell: str) -> str:
    return graded_course.outputs(course, A, student, cell)


@pytest.fixture(scope="module")
def graded():
    graded_course.need_sandbox()
    from grader.grading.run.pipeline import grade_course

    dan = graded_course.sample("alice", A, {"f_g": reference(A)["f_g"],
                                            "tp_mlp": sol.MLP_TORCH_DIRECT.strip("\n")})
    course = graded_course.make(A, ("alice", "bob"), {"dan": dan})
    run = grade_course(course, cell_timeout=180, notebook_timeout=800, memory_gb=4.0,
                       workers=1, verbose=False)
    yield course, {o.student: o for o in run.outcomes}
    shutil.rmtree(course, ignore_errors=True)


@pytest.mark.parametrize("student", ["alice", "dan"])
def test_correct_answers_in_either_framework_score_full_marks(graded, student):
    course, outcomes = graded
    o = outcomes[student]
    assert (o.status, o.score, o.max_score) == ("graded", 10.0, 10.0), (o, _outputs(course, student, "test_tp_mlp"))
    assert "FAIL" not in _outputs(course, student, "test_f_g") + _outputs(course, student, "test_tp_mlp")


def test_the_samples_mistakes_lose_their_points(graded):
    course, outcomes = graded
    o = outcomes["bob"]
    assert o.status == "graded", o
    assert (o.cells["test_f_g"][0], o.cells["test_tp_mlp"][0]) == SCORES["bob"], o


def test_each_mistake_is_named_in_its_cells_feedback(graded):
    course, _ = graded
    fg, mlp = _outputs(course, "bob", "test_f_g"), _outputs(course, "bob", "test_tp_mlp")
    assert "f's backward pass returned each rank's own gradient" in fg
    assert "added on every rank before the all-reduce" in mlp
    # the public checks caught both on the notebook's example (no points, the cell went on)
    assert "[FAIL] a10 (public): f and g" in fg and "[FAIL] a10 (public): tp_mlp" in mlp
