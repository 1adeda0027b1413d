"""Assignment 9's checks: ZeRO's memory accounting and a 1F1B schedule on a unit clock
(no processes, no framework: fast)."""
import nbformat
import pytest

from grader.checks import a9_zero_pipeline as a9_public
from grader.lab import planner
from tests.checks import a9_solutions as sol
from tests.checks.notebooks import ROOT, hidden_checks, namespace, reference
from tests.checks.test_samples_a5_a8 import answers

a9 = hidden_checks("a9_zero_pipeline")      # exercises/hidden
A = "a9_zero_pipeline"


def notebook_functions(answers_=None):
    ns = namespace(A, answers_ or {})
    return ns["zero_bytes"], ns["one_f_one_b"]


def test_the_notebooks_reference_scores_full_marks():
    assert [r.points for r in a9.check_all(*notebook_functions())] == [5, 5]


@pytest.mark.parametrize("fn", [sol.zero_by_table, sol.zero_padded])
def test_other_correct_accountings_score_full_marks(fn):
    assert a9.check_zero_bytes(fn).points == 5


@pytest.mark.parametrize("fn", [sol.schedule_pytorch_style, sol.schedule_greedy])
def test_other_correct_schedules_score_full_marks(fn):
    assert a9.check_schedule(fn).points == 5


@pytest.mark.parametrize("fn, lost, named", [
    (sol.zero_stage1_splits_grads, 1, "ZeRO-1 splits only the optimizer state"),
    (sol.zero_stage2_splits_params, 1, "ZeRO-2 splits the gradients and the optimizer"),
    (sol.zero_adam_hard_coded, 1, "use optimizer_values"),
    (sol.zero_ranks_minus_one, 3, "divide by ranks, not ranks - 1"),
    (sol.zero_values_not_bytes, 5, "multiply the values by bytes_per_value"),
])
def test_each_accounting_mistake_loses_its_points_and_is_named(fn, lost, named):
    r = a9.check_zero_bytes(fn)
    assert r.points == 5 - lost
    assert named in r.hint


@pytest.mark.parametrize("fn, lost, named", [
    (sol.schedule_gpipe, 2, "that is GPipe"),
    (sol.schedule_long_warmup, 2, "one forward too many"),
    (sol.schedule_no_warmup, 2, "without the warm-up forwards"),
    (sol.schedule_backward_first, 5, "only after its own forward"),
])
def test_each_schedule_mistake_loses_its_points_and_is_named(fn, lost, named):
    r = a9.check_schedule(fn)
    assert r.points == 5 - lost
    assert named in r.hint


def test_wrong_shapes_get_a_clear_message_not_a_crash():
    assert a9.check_zero_bytes(sol.zero_wrong_keys).points == 0
    assert "keys" in a9.check_zero_bytes(sol.zero_wrong_keys).seen
    r = a9.check_schedule(lambda stages, micro: [["F0"]])
    assert r.points == 0 and "stages need" in r.seen


def test_the_released_stubs_fail_the_public_checks():
    def stub(*args, **kwargs):
        raise NotImplementedError()

    assert not a9_public.public_zero_bytes(stub).passed
    assert not a9_public.public_one_f_one_b(stub).passed


def test_the_unit_clock_gives_the_bubble_formula_for_1f1b_and_gpipe():
    for p, m in a9.SCHEDULE_CASES:
        for schedule in (a9.one_f_one_b(p, m), sol.schedule_gpipe(p, m)):
            span, _ = a9.simulate(a9_public.normalise_schedule(schedule, p), p, m)
            busy = m * (a9.F_TIME + a9.B_TIME)
            assert 1 - busy / span == pytest.approx(planner.bubble_fraction(p, m))


def test_the_accounting_agrees_with_the_planners_formula():
    for n, r, s in a9.MEMORY_CASES:
        assert a9.zero_bytes(n, r, s) == pytest.approx(planner.zero_memory(n, r, s))


def test_the_same_submission_gets_the_same_score_ten_times():
    fns = notebook_functions({"zero_bytes": reference(A)["zero_bytes"]})
    scores = {tuple(r.points for r in a9.check_all(*fns)) for _ in range(10)}
    assert scores == {(5, 5)}


@pytest.mark.parametrize("student, expected", [("alice", 10), ("bob", 7), ("carol", 0)])
def test_sample_submissions_score_as_documented(student, expected):
    ns = namespace(A, answers(student, A))
    assert sum(r.points for r in a9.check_all(ns["zero_bytes"], ns["one_f_one_b"])) == expected


def test_carols_sample_leaves_the_schedule_as_released():
    nb = nbformat.read(ROOT / "exercises" / "submitted" / "carol" / A / f"{A}.ipynb", 4)
    cell = next(c for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "one_f_one_b")
    assert "NotImplementedError" in cell.source
