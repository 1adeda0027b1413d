"""The from-scratch data-parallel step: splitting, equality with one device, what devices hold."""
import numpy as np
import pytest

from grader.lab import Timeline
from grader.lab.dataparallel import (PHASES, DataParallelTrainer, make_problem, max_abs_diff,
                                     phase_table, split_sizes, train_single)
from grader.lab.devices import HostDevice

FRAMEWORKS = ["torch", "paddle"]
RTOL, ATOL = 1e-5, 1e-6  # float32: only the order of the additions differs


def _flat(ws):
    return np.concatenate([np.asarray(w).ravel() for w in ws])


@pytest.mark.parametrize("n, parts", [(512, 2), (10, 4), (6, 4), (3, 4), (7, 3), (1, 2), (9, 9)])
def test_split_sizes_are_those_of_torch_chunk(n, parts):
    import torch

    expected = [len(c) for c in torch.arange(n).chunk(parts)]
    assert split_sizes(n, parts) == expected
    assert sum(split_sizes(n, parts)) == n


def test_splitting_nothing_is_an_error():
    with pytest.raises(ValueError):
        split_sizes(0, 2)


def test_both_frameworks_start_from_the_same_float32_problem():
    a, b = make_problem(seed=3), make_problem(seed=3)
    assert a.x.dtype == a.y.dtype == np.float32
    assert all(w.dtype == np.float32 for w in a.weights)
    assert max_abs_diff(a.weights, b.weights) == 0.0
    ref_t = train_single("torch", a, 2)
    ref_p = train_single("paddle", a, 2)
    np.testing.assert_allclose(_flat(ref_t["weights"]), _flat(ref_p["weights"]), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("batch", [64, 7])  # even and uneven chunks
def test_two_in_process_devices_train_like_one_device(framework, batch):
    problem = make_problem(batch=batch, seed=1)
    devices = [HostDevice("cpu", framework), HostDevice("cpu", framework)]
    trainer = DataParallelTrainer(devices, problem)
    losses = [trainer.step(problem.x, problem.y) for _ in range(4)]
    ref = train_single(framework, problem, 4)
    np.testing.assert_allclose(losses, ref["losses"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(_flat(trainer.weights()), _flat(ref["weights"]), rtol=RTOL, atol=ATOL)
    assert max_abs_diff(trainer.weights(), problem.weights) > 1e-3  # it did train


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_device_0_holds_the_targets_and_gathered_outputs_on_top_of_a_replica(framework):
    problem = make_problem(batch=32, d_in=8, hidden=16, d_out=4)
    devices = [HostDevice("cpu", framework), HostDevice("cpu", framework)]
    trainer = DataParallelTrainer(devices, problem, track_memory=True)
    trainer.step(problem.x, problem.y)
    m0, m1 = trainer.memory()
    n_params = sum(w.size for w in problem.weights)
    assert m0["parameters"] == m1["parameters"] == 4 * n_params
    assert m0["gradients"] == m1["gradients"] == 4 * n_params
    assert m0["inputs"] == m1["inputs"] == 4 * 16 * 8            # 16 rows of 8 features each
    assert m0["targets"] == 4 * 32 * 4                            # the whole batch's targets
    assert m0["gathered outputs + their gradient"] == 2 * 4 * 32 * 4
    assert "targets" not in m1
    assert sum(m0.values()) > sum(m1.values())


def test_memory_is_not_counted_unless_asked():
    problem = make_problem(batch=8, d_in=4, hidden=4, d_out=2)
    trainer = DataParallelTrainer([HostDevice("cpu", "torch")] * 2, problem)
    trainer.step(problem.x, problem.y)
    with pytest.raises(RuntimeError, match="track_memory"):
        trainer.memory()


def test_a_batch_smaller_than_the_devices_leaves_devices_idle_and_still_trains_right():
    problem = make_problem(batch=3, seed=2)
    devices = [HostDevice("cpu", "torch") for _ in range(4)]
    trainer = DataParallelTrainer(devices, problem)
    for _ in range(2):
        trainer.step(problem.x, problem.y)
    ref = train_single("torch", problem, 2)
    np.testing.assert_allclose(_flat(trainer.weights()), _flat(ref["weights"]), rtol=RTOL, atol=ATOL)


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
    np.testing.assert_allclose(_flat(trainer.weights()), _flat(ref["weights"]), rtol=RTOL, atol=ATOL)

    table = phase_table(Timeline.from_devices(devices, since_ns=since), steps=3)
    d0, d1 = (table[str(d)] for d in devices)
    for phase in ("scatter", "forward", "gather", "backward", "reduce"):
        assert d0[phase] > 0 and d1[phase] > 0, phase
    for phase in ("loss", "update"):           # the output device's extra work
        assert d0[phase] > 0 and d1[phase] == 0, phase
