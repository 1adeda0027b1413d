"""The one place that decides which devices an experiment gets.

``get_devices(n, framework)`` returns a :class:`DevicePlan`: real GPUs when there are at
least ``n``; otherwise the GPUs there are plus the CPU; otherwise ``n`` CPU worker
processes. ``standin_devices(n, framework)`` always gives CPU worker processes: the
labelled CPU stand-in a chapter runs beside (or instead of) its GPU cell.

Every device, real or standing in, offers one small interface modelled on a GPU queue,
declared once as the :class:`Device` protocol: :class:`GpuDevice`, :class:`HostDevice`
and :class:`WorkerDevice` here implement it. (The graded exercises' simulated GPUs,
:mod:`grader.sim`, are not devices of this kind: they stand behind the frameworks'
own ``torch.cuda`` / ``paddle.device`` API, which the answers call.)

The plan prints one honest line saying what stands in for what.
"""
from __future__ import annotations

import atexit
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from .backends import get_backend
from .workers import LOG_DIR_PREFIX, Future, Ref, TaskRecord, Worker, sweep_stale_logs

__all__ = ["DevicePlan", "Device", "GpuDevice", "HostDevice", "WorkerDevice",
           "get_devices", "standin_devices", "plan_devices", "close_workers", "cpu_cores",
           "load_line", "paddle_cpu_wheel", "torch_cpu_wheel"]


@runtime_checkable
class Device(Protocol):
    """The interface every device of an experiment offers, real or standing in."""

    spec: str

    @property
    def records(self) -> list[TaskRecord]:
        """The intervals the device clocked (``TaskRecord``: label, kind, start, end in
        ns), for timelines."""
        ...

    def label(self) -> str:
        """What the device is, in words, for the line that says what stands in."""
        ...

    def put(self, array: Any, label: str = "put") -> Any:
        """Copy a host array onto the device; returns a handle to it there."""
        ...

    def submit(self, fn: Callable[..., Any], *args: Any, keep: bool = True,
               label: str | None = None, kind: str = "compute", **kwargs: Any) -> Any:
        """Queue ``fn(*args, **kwargs)`` on the device and return at once; handles among
        the arguments are the values they name there. ``keep``: the result stays on the
        device (what is returned is a handle to it)."""
        ...

    def get(self, value: Any, label: str = "get") -> np.ndarray:
        """Copy a value back to the host as NumPy, after the work that makes it."""
        ...

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait until everything queued on the device has finished."""
        ...


def cpu_cores() -> int:
    """Cores this process may use (respects taskset / cgroup CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def load_line() -> str:
    """How busy the machine is: other programs on the same cores slow a CPU measurement
    down, so chapters print this beside their CPU timings."""
    return (f"load average over the last minute: {os.getloadavg()[0]:.1f} on "
            f"{cpu_cores()} cores")


def plan_devices(n: int, gpu_count: int) -> tuple[str, list[str]]:
    """Pure decision: what stands in for ``n`` devices given ``gpu_count`` GPUs.

    Returns ``(kind, specs)`` with kind ``"gpus"``, ``"gpu+cpu"`` or ``"cpu-workers"`` and
    specs like ``"gpu:0"``, ``"cpu"`` or ``"worker:1"``.
    """
    if n < 1:
        raise ValueError(f"an experiment needs at least one device, asked for {n}")
    if gpu_count >= n:
        return "gpus", [f"gpu:{i}" for i in range(n)]
    if gpu_count >= 1:
        return "gpu+cpu", [f"gpu:{i}" for i in range(gpu_count)] + ["cpu"]
    return "cpu-workers", [f"worker:{i}" for i in range(n)]


class _Handle:
    """A value on a GPU or the host, as returned by ``put``/``submit`` there."""

    def __init__(self, value: Any) -> None:
        self.value = value


class _DoneFuture:
    def __init__(self, value: Any) -> None:
        self._value = value

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        return self._value


class _FrameworkDevice:
    """What the devices driven through a framework share (spec, framework, adapter)."""

    def __init__(self, spec: str, framework: str) -> None:
        self.spec, self.framework = spec, framework

    @property
    def backend(self) -> Any:
        return get_backend(self.framework)

    def __str__(self) -> str:
        return self.spec

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r}, {self.framework!r})"


class _InProcessDevice(_FrameworkDevice):
    """A GPU or the host CPU, driven from this process through the backend adapter."""

    def __init__(self, spec: str, framework: str) -> None:
        super().__init__(spec, framework)
        self.local_spec = spec
        self._events: list = []
        self._records: list[TaskRecord] = []

    @property
    def records(self) -> list[TaskRecord]:
        self._flush_events()
        return self._records

    def put(self, array: np.ndarray, label: str = "put") -> Any:
        return self.backend.from_numpy(np.asarray(array), self.local_spec)

    def submit(self, fn: Callable, *args: Any, keep: bool = True, label: str | None = None,
               kind: str = "compute", **kwargs: Any) -> _DoneFuture:
        """Run ``fn`` here. On a GPU its kernels are queued and this returns before they finish."""
        be = self.backend
        start, end = be.Event(self.local_spec), be.Event(self.local_spec)
        t_host = time.perf_counter_ns()
        start.record()
        value = fn(*args, **kwargs)
        end.record()
        self._events.append((label or getattr(fn, "__name__", "task"), kind, t_host, start, end))
        return _DoneFuture(value)

    def get(self, value: Any, label: str = "get") -> np.ndarray:
        if isinstance(value, _DoneFuture):
            value = value.result()
        return self.backend.to_numpy(value)

    def synchronize(self, timeout: float | None = None) -> None:
        self.backend.synchronize(self.local_spec)

    def _flush_events(self) -> None:
        # Events give durations on the device's own clock. Anchor them at the host time of
        # the first submission: exact on the CPU (events are host clocks there); on a GPU
        # the first kernel may start a little after it was queued.
        if not self._events:
            return
        self.synchronize()
        _, _, first_host, first_start, _ = self._events[0]
        for label, kind, _, start, end in self._events:
            t0 = first_host + int(first_start.elapsed_ms(start) * 1e6)
            t1 = first_host + int(first_start.elapsed_ms(end) * 1e6)
            self._records.append(TaskRecord(label, kind, t0, t1))
        self._events.clear()


class GpuDevice(_InProcessDevice):
    def label(self) -> str:
        return f"{self.spec} ({self.backend.gpu_name(int(self.spec.split(':')[1]))})"


class HostDevice(_InProcessDevice):
    def label(self) -> str:
        return f"cpu (this process, {cpu_cores()} cores)"


class WorkerDevice(_FrameworkDevice):
    """A CPU worker process standing in for a device (see :mod:`grader.lab.core.workers`)."""

    def __init__(self, spec: str, framework: str, worker: Worker) -> None:
        super().__init__(spec, framework)
        self.worker = worker

    @property
    def records(self) -> list[TaskRecord]:
        return self.worker.records

    def put(self, array: np.ndarray, label: str = "put") -> Ref:
        """The array as a CPU tensor of the framework, in the worker's memory."""
        return self.worker.submit(_to_tensor, self.framework, np.asarray(array), keep=True,
                                  label=label, kind="copy").result()

    def submit(self, fn: Callable, *args: Any, keep: bool = True, label: str | None = None,
               kind: str = "compute", **kwargs: Any) -> Future:
        return self.worker.submit(fn, *args, keep=keep, label=label, kind=kind, **kwargs)

    def get(self, ref: Any, label: str = "get") -> np.ndarray:
        if isinstance(ref, Future):
            ref = ref.result()
        return self.worker.submit(_to_numpy, self.framework, ref, label=label,
                                  kind="copy").result()

    def synchronize(self, timeout: float | None = None) -> None:
        self.worker.synchronize(timeout)

    def label(self) -> str:
        return f"{self.spec} (CPU worker process, {self.worker.threads} thread(s))"


def _to_tensor(framework: str, array: np.ndarray) -> Any:
    return get_backend(framework).from_numpy(array, "cpu")


def _to_numpy(framework: str, value: Any) -> np.ndarray:
    return get_backend(framework).to_numpy(value)


@dataclass
class DevicePlan:
    """What an experiment got: the devices, what kind of stand-in, and a line saying so."""

    requested: int
    kind: str
    devices: list[Device]
    gpu_count: int
    framework: str

    def __iter__(self):
        return iter(self.devices)

    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, i: int) -> Device:
        return self.devices[i]

    @property
    def simulated(self) -> bool:
        """True when CPU worker processes stand in for devices."""
        return self.kind == "cpu-workers"

    def describe(self, standin: bool = False) -> str:
        n, label = self.requested, get_backend(self.framework).LABEL
        if standin and self.kind == "cpu-workers":
            threads = self.devices[0].worker.threads
            cores = (f"{threads} of this machine's {cpu_cores()} cores each" if n > 1 else
                     f"{threads} of this machine's {cpu_cores()} cores")
            return (f"CPU stand-in: {n} worker process{'es' if n > 1 else ''}\n  ({cores}, "
                    f"{label} on the CPU), not GPUs")
        if self.kind == "gpus":
            return f"{n} GPU(s) for {n} devices ({label}): " + ", ".join(d.label() for d in self.devices)
        if self.kind == "gpu+cpu":
            return (f"{self.gpu_count} GPU(s) for {n} devices: the CPU stands in for the rest "
                    f"({label}): " + ", ".join(d.label() for d in self.devices))
        threads = self.devices[0].worker.threads
        # two lines: one was 102 characters, cut in the page's output box
        if n == 1:
            return (f"no GPU: 1 CPU worker process stands in for the device\n  "
                    f"({threads} of this machine's {cpu_cores()} cores, {label})")
        return (f"no GPU: {n} CPU worker processes stand in for {n} devices\n  "
                f"({threads} of this machine's {cpu_cores()} cores each, {label})")

    def synchronize(self) -> None:
        for d in self.devices:
            d.synchronize()

    def records(self) -> dict[str, list[TaskRecord]]:
        return {d.spec: list(d.records) for d in self.devices}

    def clear_records(self) -> None:
        for d in self.devices:
            d.synchronize()
            d.records.clear()


_WORKERS: dict[int, list[Worker]] = {}


def _workers(n: int, fresh: bool) -> list[Worker]:
    pool = _WORKERS.get(n)
    if pool and (fresh or not all(w.alive for w in pool)):
        for w in pool:
            w.close()
        pool = None
    if not pool:
        threads = max(1, cpu_cores() // n)
        if not _WORKERS:    # this process's first pool: earlier kernels' folders go first
            sweep_stale_logs()
        log_dir = tempfile.mkdtemp(prefix=LOG_DIR_PREFIX)
        pool = [Worker(i, threads, log_dir) for i in range(n)]
        _WORKERS[n] = pool
    return pool


def close_workers() -> None:
    """Stop every worker process this process started."""
    for pool in _WORKERS.values():
        for w in pool:
            w.close()
    _WORKERS.clear()


atexit.register(close_workers)


def standin_devices(n: int = 2, framework: str = "torch", *, fresh: bool = False,
                    verbose: bool = True) -> DevicePlan:
    """``n`` CPU worker processes, whatever GPUs the machine has: the CPU stand-in a
    chapter runs beside its GPU cell, with a line saying so."""
    plan = get_devices(n, framework, gpu_count=0, fresh=fresh, verbose=False)
    if verbose:
        print(plan.describe(standin=True))
    return plan


def get_devices(n: int = 2, framework: str = "torch", *, gpu_count: int | None = None,
                fresh: bool = False, verbose: bool = True) -> DevicePlan:
    """Give an experiment ``n`` devices and print one line saying what they are.

    ``gpu_count`` overrides what the backend reports (tests fake 0, 1 or 2 GPUs with it).
    ``fresh=True`` restarts CPU workers (after one died, for example).
    """
    backend = get_backend(framework)
    gpus = backend.gpu_count() if gpu_count is None else gpu_count
    kind, specs = plan_devices(n, gpus)
    devices: list[Device] = []
    if kind == "cpu-workers":
        pool = _workers(n, fresh)
        devices = [WorkerDevice(s, framework, worker=w) for s, w in zip(specs, pool)]
    else:
        for s in specs:
            devices.append(GpuDevice(s, framework) if s.startswith("gpu") else HostDevice(s, framework))
    plan = DevicePlan(n, kind, devices, gpus, framework)
    if verbose:
        print(plan.describe())
    return plan


def _unimported_version(module: str, dist: str) -> str | None:
    """``dist``'s installed version while ``module`` is installed but not imported yet
    (None otherwise): read from the package's metadata, which costs no import."""
    import importlib.metadata
    import importlib.util
    import sys

    if module in sys.modules or importlib.util.find_spec(module) is None:
        return None
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def paddle_cpu_wheel() -> str | None:
    """The version of Paddle's CPU-only wheel (``paddlepaddle``, built without CUDA: it
    sees no GPU anywhere) when that is what is installed and Paddle is not imported yet;
    otherwise None. The hardware line then reads it from the package's metadata instead
    of importing Paddle (seconds of CPU) in a kernel that may never use it."""
    version = _unimported_version("paddle", "paddlepaddle")
    if version is None:
        return None
    for gpu_wheel in ("paddlepaddle-gpu", "paddlepaddle-dcu", "paddlepaddle-xpu"):
        if _unimported_version("paddle", gpu_wheel) is not None:
            return None             # a GPU build is installed too: ask Paddle itself
    return version


def torch_cpu_wheel() -> str | None:
    """The version of PyTorch's CPU-only wheel (its local version label is ``+cpu``:
    built without CUDA or ROCm, it sees no GPU anywhere) when that is what is installed
    and PyTorch is not imported yet; otherwise None. As with Paddle's, the hardware line
    then reads it from the package's metadata instead of importing PyTorch."""
    version = _unimported_version("torch", "torch")
    return version if version is not None and version.endswith("+cpu") else None
