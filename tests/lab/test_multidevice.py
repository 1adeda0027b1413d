import numpy as np
import pytest

from grader.lab import get_devices
from grader.lab.experiments_multi import (SEED_N, SEED_PRODUCTS, StreamQueue, memory_plan, small_ops,
                                          two_devices, workload_size)
from grader.lab.workloads import matmul_last


def test_memory_plan_of_the_seed_is_3_2_gb_kept_and_under_200_mb_bounded():
    m = memory_plan(SEED_N, SEED_PRODUCTS)
    assert m["matrix"] == 4000 * 4000 * 4
    assert m["keep_all"] == 51 * m["matrix"] and m["keep_all"] > 3.2e9
    assert m["keep_last"] == 3 * m["matrix"] < 4e9


def test_workload_is_the_seeds_on_gpus_and_smaller_on_cpu_workers():
    assert workload_size(simulated=False)[:2] == (SEED_N, SEED_PRODUCTS)
    n, k, why = workload_size(simulated=True)
    assert n * n * k < SEED_N ** 2 * SEED_PRODUCTS and "scaled down" in why
    assert workload_size(True, tiny=True)[0] < n


def test_stream_queue_on_the_host_runs_the_work_like_a_plain_call():
    q = StreamQueue("paddle", "cpu", None)
    data = np.random.default_rng(1).standard_normal((8, 8), dtype=np.float32)
    y = q.submit(matmul_last, q.put(data), 2)
    q.synchronize()
    np.testing.assert_allclose(y.numpy(), data @ data, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_both_devices_work_at_the_same_time(framework):
    plan = get_devices(2, framework, verbose=False)
    data = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
    res = two_devices(plan.devices, data, products=20, repeats=2)
    a, b = (res.timeline.busy(r) for r in res.timeline.rows)
    assert len(res.timeline.rows) == 2
    # the later start is before the earlier end: the intervals overlap
    assert max(a[0][0], b[0][0]) < min(a[-1][1], b[-1][1])
    assert res.overlap_s > 0 and res.ideal >= 1.0
    assert "speedup" in res.report()


@pytest.mark.slow
def test_small_ops_on_the_host_counts_every_product():
    q = StreamQueue("torch", "cpu", None)
    r = small_ops(q, [StreamQueue("torch", "cpu", None), StreamQueue("torch", "cpu", None)], 8, 10,
                  repeats=2)
    assert r.n == 8 and r.count == 10 and r.speedup > 0
