"""Assignment 7's checks: ring all-reduces on gloo ranks (separate processes, hence slow)."""
import pytest

from grader.checks import a7_ring_allreduce as a7_public
from tests.checks import a7_solutions as sol
from tests.checks.notebooks import hidden_checks

a7 = hidden_checks("a7_ring_allreduce")     # exercises/hidden

pytestmark = pytest.mark.slow


def points(fn, framework="torch"):
    return [r.points for r in a7.check_all(fn, framework)]


@pytest.mark.parametrize("fn", [sol.reference, sol.isend_views, sol.reverse_ring])
def test_correct_ring_all_reduces_score_full_marks(fn):
    assert points(fn) == [3, 1, 2]


def test_the_paddle_reference_scores_full_marks():
    from tests.checks.a7_paddle_solution import reference_paddle

    assert points(reference_paddle, "paddle") == [3, 1, 2]


def test_a_function_from_a_notebook_travels_as_source():
    fn = sol.reference
    fn.__module__ = "__main__"          # what a notebook cell's function says
    try:
        program = a7_public._program(fn, "torch")
        assert program["module"].startswith("a7_student_") and program["name"] == "reference"
        assert "def reference(" in program["source"]
        assert a7_public.public_ring_all_reduce(fn).passed
    finally:
        fn.__module__ = sol.__name__


def test_forgetting_the_all_gather_keeps_the_reduce_scatter_point():
    values, p2p, ring = a7.check_all(sol.no_all_gather)
    assert values.points == 1 and "without the all-gather phase" in values.message
    assert p2p.points == 1 and ring.points == 0
    # the ring's hint names the missing all-gather (it said 'send one chunk per step, not the
    # whole tensor, and only to rank (r + 1) mod p', which the answer does)
    assert "all-gather" in ring.hint and "missing" in ring.hint and "whole tensor" not in ring.hint


def test_wrong_chunk_indexing_gets_no_value_points():
    values = a7.check_all(sol.wrong_chunk_index)[0]
    assert values.points == 0 and "(r - s) mod p" in values.hint


def test_an_all_gather_with_the_reduce_scatters_indices_gets_the_all_gathers_rule_as_hint():
    values, p2p, ring = a7.check_all(sol.all_gather_off_by_one)
    assert values.points == 0 and p2p.points == 1 and ring.points == 2
    assert "the all-gather used its indices" in values.hint and "(r - s + 1) mod p" in values.hint


def test_the_public_check_sees_wrong_sums_without_failing_the_cell():
    r = a7_public.public_ring_all_reduce(sol.all_gather_off_by_one)
    assert not r.passed and r.advisory and "do not hold the sum" in r.message


def test_sending_everything_to_everyone_is_correct_but_not_a_ring():
    values, p2p, ring = a7.check_all(sol.send_everything)
    assert values.points == 3 and ring.points == 0 and "60 elements" in ring.seen


def test_calling_all_reduce_itself_earns_nothing():
    assert points(sol.calls_all_reduce) == [0, 0, 0]


def test_a_deadlock_ends_with_a_clear_message_not_a_hang():
    results = a7.check_ring_all_reduce(sol.deadlock, world=2, length=6)
    assert all(r.points == 0 for r in results)
    assert results[0].message.startswith("deadlock") and "sends first" in results[0].hint


def test_the_same_submission_gets_the_same_score_ten_times():
    runs = {tuple(r.points for r in a7.check_ring_all_reduce(sol.reference, world=2, length=5))
            for _ in range(10)}
    assert runs == {(3, 1, 2)}


def _notebook_function(answer=None):
    """The notebook's ring_all_reduce, with its source findable the way ipykernel makes a
    cell's source findable (linecache), so it travels to the ranks as in a notebook."""
    import linecache

    from tests.checks.notebooks import namespace, reference

    src = answer or reference("a7_ring_allreduce")["ring_all_reduce"]
    lines = [l + "\n" for l in src.splitlines()]
    linecache.cache["ring_all_reduce"] = (len(src), None, lines, "ring_all_reduce")
    fn = namespace("a7_ring_allreduce", {"ring_all_reduce": src})["ring_all_reduce"]
    fn.__module__ = "__main__"
    return fn


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_the_notebooks_reference_solution_scores_full_marks(framework):
    assert points(_notebook_function(), framework) == [3, 1, 2]
