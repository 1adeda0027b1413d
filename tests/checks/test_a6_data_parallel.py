"""Assignment 6's checks: three correct implementations (and Paddle) get full marks; each typical
mistake loses the points of the piece it breaks, with a message naming it."""
import pytest

from tests.checks import a6_solutions as sol
from tests.checks.notebooks import hidden_checks

a6 = hidden_checks("a6_data_parallel")      # exercises/hidden

FULL = 14


def points(pieces, framework="torch"):
    return [r.points for r in a6.check_all(pieces, framework)]


@pytest.mark.parametrize("pieces", [sol.REFERENCE, sol.BY_HAND, sol.STACKED],
                         ids=["reference", "by_hand", "stacked"])
def test_correct_implementations_score_full_marks(pieces):
    assert sum(points(pieces)) == FULL


@pytest.mark.slow
def test_the_paddle_implementation_scores_full_marks():
    assert sum(points(sol.PADDLE, "paddle")) == FULL


def test_an_uneven_scatter_that_drops_samples_says_how_many():
    r = a6.check_scatter(sol.scatter_drops)
    assert r.points == 0 and "1 sample(s) dropped" in r.message and "[3, 3, 3]" in r.seen
    assert points(sol.with_(scatter=sol.scatter_drops))[-1] == 0   # training no longer matches


@pytest.mark.parametrize("bad, says", [(sol.replicate_shared, "one and the same dict"),
                                       (sol.replicate_same_tensors, "shared: ['W1'")])
def test_replicas_sharing_parameters_lose_the_replicate_points(bad, says):
    r = a6.check_replicate(bad)
    assert r.points == 0 and says in r.seen and "clone()" in r.hint


@pytest.mark.slow
def test_a_sequential_parallel_apply_keeps_the_order_points_but_not_the_concurrency_point():
    r = a6.check_parallel_apply(sol.parallel_apply_sequential)
    assert (r.points, r.max_points) == (2, 3) and "at most 1 at once" in r.seen


@pytest.mark.slow
def test_a_parallel_apply_that_pairs_replicas_with_the_wrong_inputs_gets_nothing():
    r = a6.check_parallel_apply(lambda fn, reps, ins: [fn(reps[0], *a) for a in ins])
    assert r.points == 0 and "wrong inputs" in r.message


def test_gather_in_the_wrong_order_is_caught():
    assert a6.check_gather(sol.gather_reversed).points == 0


@pytest.mark.parametrize("bad, diagnosis", [
    (sol.reduce_summed, "summed"), (sol.reduce_plain_mean, "ignores the chunk sizes"),
    (sol.reduce_twice, "averaged twice")])
def test_wrongly_averaged_gradients_are_diagnosed_and_training_diverges(bad, diagnosis):
    results = a6.check_all(sol.with_(reduce_gradients=bad))
    reduce, training = results[4], results[5]
    assert reduce.points == 0 and diagnosis in reduce.seen
    assert training.points == 0 and "W1" in training.seen
    assert sum(r.points for r in results) == FULL - 6


def test_a_piece_that_raises_gets_zero_for_that_piece_only():
    def broken(batch, n):
        raise ValueError("todo")

    results = a6.check_all(sol.with_(scatter=broken))
    assert results[0].points == 0 and "ValueError: todo" in results[0].seen
    assert [r.points for r in results[1:5]] == [2, 3, 1, 3]


def test_the_same_submission_gets_the_same_score_ten_times():
    assert len({tuple(points(sol.STACKED)) for _ in range(10)}) == 1


def _notebook_pieces():
    from tests.checks.notebooks import namespace

    ns = namespace("a6_data_parallel", {})
    return {k: ns[k] for k in ("scatter", "replicate", "parallel_apply", "gather", "reduce_gradients")}


def test_the_notebooks_reference_solution_scores_full_marks():
    assert sum(points(_notebook_pieces())) == FULL


@pytest.mark.slow
def test_the_notebooks_reference_solution_scores_full_marks_with_paddle():
    assert sum(points(_notebook_pieces(), "paddle")) == FULL
