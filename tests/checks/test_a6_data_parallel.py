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
@pytest.mark.parametrize("pieces", [sol.PADDLE, sol.PADDLE_SPLIT], ids=["paddle", "paddle_split"])
def test_the_paddle_implementations_score_full_marks(pieces):
    assert sum(points(pieces, "paddle")) == FULL


def test_chunk_sizes_are_torch_chunks_for_every_batch_and_device_count():
    import torch

    for rows in range(1, 40):
        for n in range(1, 9):
            assert a6.chunk_sizes(rows, n) == [len(c) for c in torch.arange(rows).chunk(n)]
    assert a6.chunk_sizes(10, 3) == [4, 4, 2] and a6.chunk_sizes(6, 4) == [2, 2, 2]


def test_an_uneven_scatter_that_drops_samples_says_how_many():
    r = a6.check_scatter(sol.scatter_drops)
    assert r.points == 0 and "1 sample(s) dropped" in r.message and "[3, 3, 3]" in r.seen
    assert points(sol.with_(scatter=sol.scatter_drops))[-1] == 0   # training no longer matches


@pytest.mark.parametrize("bad", [sol.scatter_array_split, sol.scatter_tensor_split])
def test_numpys_array_split_sizes_lose_the_size_point_and_the_hint_names_them(bad):
    r = a6.check_scatter(bad)
    assert (r.points, r.max_points) == (1, 2), r.text()
    assert "[4, 3, 3]" in r.seen and "[4, 4, 2]" in r.expected and "array_split" in r.hint
    # the training still matches: reduce_gradients weights each chunk by its size
    assert points(sol.with_(scatter=bad)) == [1, 2, 3, 1, 3, 3]


@pytest.mark.slow
def test_paddle_chunk_raises_on_an_uneven_batch_and_loses_scatter_and_training():
    results = a6.check_all(sol.paddle_with(scatter=sol.scatter_paddle_chunk), "paddle")
    assert [r.points for r in results] == [0, 2, 3, 1, 3, 0]
    assert "ValueError" in results[0].seen


@pytest.mark.slow
def test_a_plain_mean_in_paddle_is_diagnosed_like_in_pytorch():
    results = a6.check_all(sol.paddle_with(reduce_gradients=sol.reduce_paddle_plain_mean), "paddle")
    assert [r.points for r in results] == [2, 2, 3, 1, 0, 0]
    assert "ignores the chunk sizes" in results[4].seen


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
