import numpy as np
import pytest

from grader.lab import launch
from grader.lab.experiments_comm import (COPY_MODES, comm_overlap_rank, comm_timelines, copy_overlap,
                                         nonblocking_read_trap)


@pytest.mark.parametrize("framework", ["torch", "paddle"])
@pytest.mark.parametrize("mode", COPY_MODES)
def test_copy_overlap_on_the_host_copies_every_result_correctly(framework, mode):
    data = np.random.default_rng(0).standard_normal((16, 16), dtype=np.float32)
    run = copy_overlap(framework, "cpu", data, 3, mode)
    assert run.correct
    assert len(run.timeline.busy("compute")) >= 1
    assert len([i for i in run.timeline.intervals if i.kind == "copy"]) == 3
    assert len([i for i in run.timeline.intervals if i.kind == "compute"]) == 3
    # on the host nothing is asynchronous: the copies cannot overlap the products
    assert run.overlap_s == pytest.approx(0.0, abs=1e-4)


def test_unknown_copy_mode_is_an_error():
    with pytest.raises(ValueError, match="not one of"):
        copy_overlap("torch", "cpu", np.ones((2, 2), np.float32), 1, "async")


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_host_copy_read_before_synchronize_is_already_right(framework):
    r = nonblocking_read_trap(framework, "cpu", np.eye(8, dtype=np.float32), products=2)
    assert r["early_matches"] and r["late_matches"] and r["early_max_abs_diff"] == 0.0


@pytest.mark.slow
def test_async_all_reduce_overlaps_compute_and_sums_right_in_torch():
    res = launch(comm_overlap_rank, nprocs=2, framework="torch", args=(256, 4, 200_000))
    assert all(r["all_reduce_correct"] for r in res)
    ct = comm_timelines(res, "t")
    assert ct.overlap_s["sequential"] == pytest.approx(0.0, abs=1e-6)
    for r in res:
        comp = ct.overlapped.busy(f"rank {r['rank']} compute")
        comm = ct.overlapped.busy(f"rank {r['rank']} comm")
        # the first all-reduce starts before the last chunk's compute ends
        assert comm[0][0] < comp[-1][1]


@pytest.mark.slow
def test_paddle_ranks_sum_right_and_report_whether_the_async_op_was_async():
    res = launch(comm_overlap_rank, nprocs=2, framework="paddle", args=(128, 3, 100_000))
    assert all(r["all_reduce_correct"] for r in res)
    assert all(isinstance(r["async_op_was_already_done"], bool) for r in res)
    phases = {rec[0] for rec in res[0]["records"]}
    assert phases == {"sequential", "overlapped"}
