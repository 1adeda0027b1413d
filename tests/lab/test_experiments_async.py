import numpy as np
import pytest

from grader.lab import get_devices
from grader.lab.experiments_async import queue_timeline, threads_scaling, timing_pitfalls
from grader.lab.devices import HostDevice


def test_threads_scaling_times_each_thread_count_and_restores_the_setting():
    from grader.lab.backends import get_backend
    be = get_backend("torch")
    before = be.get_num_threads()
    x = be.randn((64, 64))
    times = threads_scaling(x, "torch", (1, 2), repeats=2)
    assert sorted(times) == [1, 2] and all(t > 0 for t in times.values())
    assert be.get_num_threads() == before


def test_timing_pitfalls_on_the_host_reports_each_clock():
    q = HostDevice("cpu", "torch")
    data = np.ones((32, 32), np.float32)
    p = timing_pitfalls(q, data, products=3, repeats=2)
    assert len(p.synced.samples) == 2 and p.products == 3 and p.n == 32
    assert p.flop == 2 * 32 ** 3 * 3
    assert "no synchronize" in p.report()


@pytest.mark.slow
def test_worker_tasks_run_one_after_another_after_the_host_is_free():
    dev = get_devices(2, "torch", verbose=False)[1]
    data = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
    tl, host_free, done = queue_timeline(dev, data, products=4, tasks=3)
    tasks = [i for i in tl.intervals if i.row == str(dev)]
    assert len(tasks) == 3 and len([i for i in tl.intervals if i.row == "host"]) == 3
    for a, b in zip(tasks, tasks[1:]):
        assert b.start >= a.end  # one queue: the next task starts after the previous ended
    assert done >= tasks[-1].end - tl.start() - 1e-3
    assert host_free < done  # submit returned before the last task had finished
