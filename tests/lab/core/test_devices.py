import numpy as np
import pytest

from grader.lab.core import devices as devmod
from grader.lab.core.devices import GpuDevice, HostDevice, WorkerDevice, get_devices, plan_devices
from grader.lab.core.timeline import Timeline
from grader.lab.core.workers import WorkerDied, WorkerError
from grader.lab.core.workloads import matmul_last, spin


@pytest.mark.parametrize("gpus, kind, specs", [
    (0, "cpu-workers", ["worker:0", "worker:1"]),
    (1, "gpu+cpu", ["gpu:0", "cpu"]),
    (2, "gpus", ["gpu:0", "gpu:1"]),
    (8, "gpus", ["gpu:0", "gpu:1"]),
])
def test_plan_for_two_devices_given_0_1_2_gpus(gpus, kind, specs):
    assert plan_devices(2, gpus) == (kind, specs)


def test_plan_rejects_zero_devices():
    with pytest.raises(ValueError, match="at least one device"):
        plan_devices(0, 2)


@pytest.mark.parametrize("framework", ["torch", "paddle"])
@pytest.mark.parametrize("gpus, types", [(1, [GpuDevice, HostDevice]), (2, [GpuDevice, GpuDevice])])
def test_faked_gpus_give_gpu_devices_in_both_frameworks(framework, gpus, types, monkeypatch):
    plan = get_devices(2, framework, gpu_count=gpus, verbose=False)
    assert [type(d) for d in plan] == types
    assert plan.framework == framework and not plan.simulated
    be = plan[0].backend
    monkeypatch.setattr(be, "gpu_name", lambda i=0: "Fake GPU")
    line = plan.describe()
    assert "GPU" in line and "Fake GPU" in line
    if gpus == 1:
        assert "CPU stands in" in line


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_no_gpu_gives_labelled_cpu_workers(framework, capsys):
    plan = get_devices(2, framework, gpu_count=0)
    out = capsys.readouterr().out
    assert out.startswith("no GPU: 2 CPU worker processes stand in for 2 devices")
    assert max(len(line) for line in out.splitlines()) <= 100   # fits an output box
    assert all(isinstance(d, WorkerDevice) for d in plan) and plan.simulated


def test_one_cpu_worker_is_described_in_the_singular():
    plan = get_devices(1, "torch", gpu_count=0, verbose=False)
    line = plan.describe()
    assert line.startswith("no GPU: 1 CPU worker process stands in for the device")
    assert "processes" not in line and "each" not in line


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_worker_computes_the_same_product_as_numpy(framework):
    plan = get_devices(2, framework, gpu_count=0, verbose=False)
    a = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    ref = plan[1].put(a)
    got = plan[1].get(plan[1].submit(matmul_last, ref, 3))
    np.testing.assert_allclose(got, a @ a, rtol=1e-4, atol=1e-4)


def test_submit_returns_before_the_work_is_done():
    plan = get_devices(2, "torch", gpu_count=0, verbose=False)
    fut = plan[0].submit(spin, 0.5, keep=False)
    assert not fut.done()            # queued like a GPU kernel, still running
    assert fut.result(timeout=30) == 0.5


def test_two_workers_really_run_at_the_same_time():
    plan = get_devices(2, "torch", gpu_count=0, verbose=False)
    plan.synchronize()
    import time
    since = time.perf_counter_ns()
    for d in plan:
        d.submit(spin, 0.3)
    plan.synchronize()
    tl = Timeline.from_devices(plan, since_ns=since)
    (a0, a1), = tl.busy("worker:0")
    (b0, b1), = tl.busy("worker:1")
    # Overlap, on any machine: the later start comes before the earlier end.
    assert max(a0, b0) < min(a1, b1)


def test_error_in_worker_carries_its_traceback():
    plan = get_devices(2, "torch", gpu_count=0, verbose=False)
    fut = plan[0].submit(plan_devices, 0, 0)   # raises ValueError inside the worker
    with pytest.raises(WorkerError, match="at least one device"):
        fut.result(timeout=30)
    assert plan[0].submit(spin, 0.0, keep=False).result(timeout=30) == 0.0  # the worker lives on


def test_a_function_that_cannot_travel_gets_a_clear_error():
    plan = get_devices(2, "torch", gpu_count=0, verbose=False)
    with pytest.raises(TypeError, match="must be importable"):
        plan[0].submit(lambda: 1)   # a lambda in a module: pickle cannot send it by name


def test_dead_worker_is_reported_and_can_be_replaced():
    import os
    plan = get_devices(2, "torch", gpu_count=0, verbose=False)
    fut = plan[0].submit(os._exit, 7)
    with pytest.raises(WorkerDied, match="exit code 7"):
        fut.result(timeout=30)
    fresh = get_devices(2, "torch", gpu_count=0, verbose=False)  # notices the dead one
    assert fresh[0].submit(spin, 0.0, keep=False).result(timeout=30) == 0.0
    assert devmod._WORKERS[2][0].alive


def test_a_worker_ends_when_the_process_that_started_it_is_killed(tmp_path):
    """A killed kernel must not leave its workers behind (they would wait forever)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = ("import sys, time\n"
            "from grader.lab.core.workers import Worker\n"
            "import numpy as np\n"
            "from grader.lab.core.devices import _to_tensor\n"
            "w = Worker(0, 1)\n"
            "w.submit(_to_tensor, 'paddle', np.zeros(2), keep=True).result(timeout=60)\n"
            "w.submit(_to_tensor, 'torch', np.zeros(2), keep=True).result(timeout=60)\n"
            "print(w._proc.pid, flush=True)\n"
            "time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    worker_pid = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{worker_pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):  # exited; its new parent has not reaped it yet
            return
        time.sleep(0.2)
    os.kill(worker_pid, signal.SIGKILL)
    raise AssertionError(f"worker {worker_pid} outlived its parent by 20 s")


def test_every_device_kind_implements_the_one_device_protocol():
    import inspect

    from grader.lab.core.devices import Device

    workers = get_devices(2, "torch", gpu_count=0, verbose=False)
    kinds = [HostDevice("cpu", "torch"), workers[0]]
    for d in kinds:
        assert isinstance(d, Device), type(d).__name__
        params = inspect.signature(d.submit).parameters
        assert {"keep", "label", "kind"} <= set(params), type(d).__name__
        assert isinstance(d.label(), str) and isinstance(d.spec, str)


def test_the_cpu_stand_in_is_labelled_as_one(capsys):
    from grader.lab.core.devices import standin_devices

    plan = standin_devices(2, "paddle")
    line = capsys.readouterr().out
    assert line.startswith("CPU stand-in: 2 worker processes") and "not GPUs" in line
    assert all(isinstance(d, WorkerDevice) for d in plan)


def test_the_load_line_names_the_load_and_the_cores():
    import re

    from grader.lab import load_line
    assert re.fullmatch(r"load average over the last minute: [\d.]+ on \d+ cores", load_line())
