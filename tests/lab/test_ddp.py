"""DDP and paddle.DataParallel on 2 ranks (gloo on CPU) against one-process training."""
import numpy as np
import pytest

from grader.lab import RankFailed, launch
from grader.lab.dataparallel import make_problem, max_abs_diff, train_single
from grader.lab.ddp import bucket_timing_rank, in_one_process, in_sequence, train_rank

RTOL, ATOL = 1e-5, 1e-6


def _flat(ws):
    return np.concatenate([np.asarray(w).ravel() for w in ws])


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_two_ranks_end_identical_and_match_one_process_on_the_global_batch(framework):
    problem = make_problem(batch=64, seed=5)
    ranks = launch(train_rank, nprocs=2, framework=framework, args=(problem, 4), timeout=120)
    ref = train_single(framework, problem, 4)
    assert [r["rows"] for r in ranks] == [32, 32]
    assert ranks[0]["wrapper"] == ("DistributedDataParallel" if framework == "torch" else "DataParallel")
    for a, b in zip(ranks[0]["weights"], ranks[1]["weights"]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(_flat(ranks[0]["weights"]), _flat(ref["weights"]), rtol=RTOL, atol=ATOL)
    assert max_abs_diff(ranks[0]["weights"], problem.weights) > 1e-3  # it did train


@pytest.mark.slow
def test_a_batch_that_does_not_split_evenly_is_refused_by_the_ranks():
    problem = make_problem(batch=7)
    with pytest.raises(RankFailed, match="does not split evenly"):
        launch(train_rank, nprocs=2, framework="torch", args=(problem, 1), timeout=90)


@pytest.mark.slow
def test_ddp_starts_all_reducing_a_bucket_before_backward_reaches_the_first_layer():
    wide = make_problem(batch=16, d_in=256, hidden=1024, d_out=256)
    marks = launch(bucket_timing_rank, nprocs=2, framework="torch", args=(wide, 0.5), timeout=120)[0]
    assert len(marks["buckets"]) >= 2
    first = min(marks["buckets"], key=lambda b: b[0])
    assert marks["backward_start"] < first[1] < marks["first_layer_grad"] <= marks["backward_end"]


def test_paddle_data_parallel_in_one_process_is_a_single_card_fallback():
    out = in_one_process("paddle", make_problem(batch=16, d_in=8, hidden=8, d_out=2), steps=1)
    assert out["world_size"] == 1 and out["wrapper"] == "DataParallel"
    assert any("single-card" in w for w in out["warnings"])
    assert out["wrapped_s"] > 0 and out["plain_s"] > 0


def test_torch_ddp_in_one_process_without_a_process_group_is_refused():
    out = in_one_process("torch", make_problem(batch=4, d_in=2, hidden=2, d_out=1))
    assert "init_process_group" in out["error"]


@pytest.mark.slow
def test_in_sequence_runs_each_rank_function_in_the_same_ranks_in_order():
    from grader.lab.dist_examples import allreduce_rank, fail_on_rank

    out = launch(in_sequence, nprocs=2,
                 framework="torch", args=([(fail_on_rank, (5,)), (allreduce_rank, ())],), timeout=90)
    assert [list(r) for r in out] == [[0, [3.0] * 4], [1, [3.0] * 4]]
