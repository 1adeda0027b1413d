"""The stand-in's data-parallel step: equal to one device, every phase clocked."""
import numpy as np
import pytest

from grader.lab import Timeline
from grader.lab.core.devices import HostDevice
from grader.lab.data_parallel.phases import PHASES, DataParallelTrainer, phase_table
from grader.lab.data_parallel.problem import make_problem, max_abs_diff, train_single

FRAMEWORKS = ["torch", "paddle"]
RTOL, ATOL = 1e-5, 1e-6  # float32: only the order of the additions differs


def _flat(ws):
    return np.concatenate([np.asarray(w).ravel() for w in ws])


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("batch", [64, 7])  # even and uneven chunks
def test_two_in_process_devices_train_like_one_device(framework, batch):
    problem = make_problem(batch=batch, seed=1)
    devices = [HostDevice("cpu", framework), HostDevice("cpu", framework)]
    trainer = DataParallelTrainer(devices, problem)
    losses = [trainer.step(problem.x, problem.y) for _ in range(4)]
    ref = train_single(framework, problem, 4)
    np.testing.assert_allclose(losses, ref["losses"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(_flat(trainer.weights()), _flat(ref["weights"]),
                               rtol=RTOL, atol=ATOL)
    assert max_abs_diff(trainer.weights(), problem.weights) > 1e-3  # it did train


def test_a_batch_smaller_than_the_devices_leaves_devices_idle_and_still_trains_right():
    problem = make_problem(batch=3, seed=2)
    devices = [HostDevice("cpu", "torch") for _ in range(4)]
    trainer = DataParallelTrainer(devices, problem)
    for _ in range(2):
        trainer.step(problem.x, problem.y)
    ref = train_single("torch", problem, 2)
    np.testing.assert_allclose(_flat(trainer.weights()), _flat(ref["weights"]),
                               rtol=RTOL, atol=ATOL)


def test_phase_table_adds_up_each_phase_per_step():
    tl = Timeline()
    tl.add("d0", 0.0, 1.0, "compute", "forward")
    tl.add("d0", 2.0, 2.5, "compute", "forward")
    tl.add("d0", 3.0, 4.0, "comm", "reduce")
    tl.add("d1", 0.0, 2.0, "compute", "forward")
    tl.add("d1", 5.0, 6.0, "other", "count")        # not a phase: ignored
    table = phase_table(tl, steps=2)
    assert table["d0"]["forward"] == pytest.approx(0.75)
    assert table["d0"]["reduce"] == pytest.approx(0.5)
    assert table["d1"]["forward"] == pytest.approx(1.0)
    assert set(table["d1"]) == set(PHASES)


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_two_cpu_workers_train_like_one_device_and_clock_every_phase(framework):
    import time

    from grader.lab import get_devices

    problem = make_problem(batch=64, seed=4)
    devices = get_devices(2, framework, gpu_count=0, verbose=False)
    trainer = DataParallelTrainer(devices, problem)
    since = time.perf_counter_ns()
    for _ in range(3):
        trainer.step(problem.x, problem.y)
    ref = train_single(framework, problem, 3)
    np.testing.assert_allclose(_flat(trainer.weights()), _flat(ref["weights"]),
                               rtol=RTOL, atol=ATOL)

    table = phase_table(Timeline.from_devices(devices, since_ns=since), steps=3)
    d0, d1 = (table[str(d)] for d in devices)
    for phase in ("scatter", "forward", "gather", "backward", "reduce"):
        assert d0[phase] > 0 and d1[phase] > 0, phase
    for phase in ("loss", "update"):           # the output device's extra work
        assert d0[phase] > 0 and d1[phase] == 0, phase
