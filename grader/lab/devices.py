"""The one place that decides which devices an experiment gets.

``get_devices(n, framework)`` returns a :class:`DevicePlan`: real GPUs when there are at
least ``n``; otherwise the GPUs there are plus the CPU; otherwise ``n`` CPU worker
processes. Every device offers the same small interface, modelled on a GPU queue:

- ``put(array)`` copies a NumPy array onto the device and returns a handle;
- ``submit(fn, *args)`` queues work and returns at once with a future;
- ``get(handle)`` copies a value back to the host as NumPy;
- ``synchronize()`` waits for everything queued;
- ``records`` holds the intervals the device clocked, for timelines.

The plan prints one honest line saying what stands in for what.
"""
from __future__ import annotations

import atexit
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .backends import get_backend
from .workers import Future, Ref, TaskRecord, Worker

__all__ = ["DevicePlan", "Device", "GpuDevice", "HostDevice", "WorkerDevice",
           "get_devices", "plan_devices", "close_workers", "cpu_cores"]


def cpu_cores() -> int:
    """Cores this process may use (respects taskset / cgroup CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


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


class Device:
    """Common interface; see the module docstring."""

    def __init__(self, spec: str, framework: str) -> None:
        self.spec, self.framework = spec, framework

    @property
    def backend(self) -> Any:
        return get_backend(self.framework)

    @property
    def records(self) -> list[TaskRecord]:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.spec

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r}, {self.framework!r})"

    def label(self) -> str:
        raise NotImplementedError


class _InProcessDevice(Device):
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


class WorkerDevice(Device):
    """A CPU worker process standing in for a device (see :mod:`grader.lab.workers`)."""

    def __init__(self, spec: str, framework: str, worker: Worker) -> None:
        super().__init__(spec, framework)
        self.worker = worker

    @property
    def records(self) -> list[TaskRecord]:
        return self.worker.records

    def put(self, array: np.ndarray, label: str = "put") -> Ref:
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

    def describe(self) -> str:
        n, label = self.requested, get_backend(self.framework).LABEL
        if self.kind == "gpus":
            return f"{n} GPU(s) for {n} devices ({label}): " + ", ".join(d.label() for d in self.devices)
        if self.kind == "gpu+cpu":
            return (f"{self.gpu_count} GPU(s) for {n} devices: the CPU stands in for the rest "
                    f"({label}): " + ", ".join(d.label() for d in self.devices))
        threads = self.devices[0].worker.threads
        return (f"no GPU: {n} CPU worker processes stand in for {n} devices "
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
        log_dir = tempfile.mkdtemp(prefix="course-workers-")
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
