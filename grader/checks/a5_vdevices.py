"""Deterministic virtual devices for grading assignment 5 (a DAG scheduled on two devices).

They offer the interface of :func:`grader.lab.get_devices`' devices (``put``, ``submit``,
``get``, ``synchronize``, ``records``), so a student's scheduling function runs unchanged on
real devices and here. Values are computed for real, in this process (NumPy, float32), so
the answer can be checked; *time* is virtual: every operation has a known duration and
every device a queue, so the schedule a submission produces is the same on any machine.

The model, in virtual milliseconds:

- each device runs one task at a time, in the order submitted (one queue, like a GPU's
  default stream); a task starts when the device is free, the host has submitted it and
  its inputs are ready;
- ``submit`` returns at once (the host pays ``LAUNCH_MS``); ``future.result()``,
  ``get`` and ``synchronize`` make the host wait;
- ``put`` (host to device) and ``get`` (device to host) take ``bytes / COPY_BYTES_PER_MS``
  and block the host, like a copy from pageable memory;
- a matrix product ``m x k @ k x n`` takes ``2 m k n / FLOPS_PER_MS``; an element-wise
  task takes ``elements / ELEMS_PER_MS``.

Why not :mod:`grader.lab.sim`: it raises on a value used on the wrong device, which would end
the run and with it every other point; here the violation is recorded and grading goes on.
Copies between devices go through the host (``dst.put(src.get(ref))``), as they must with
the course's real devices, so a schedule written here runs unchanged on ``get_devices(2)``.

A value lives on the device that produced it. Handing a device a value that lives on
another one is recorded as a *violation* (a real GPU would fault or read garbage; a CPU
worker has no such key) and the value is used anyway, so that the rest can still be graded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from grader.lab.workers import TaskRecord
from grader.wire import value_type

__all__ = ["VirtualClock", "VirtualDevice", "VRef", "VFuture", "virtual_devices", "task_cost_ms",
           "LAUNCH_MS", "COPY_BYTES_PER_MS", "FLOPS_PER_MS", "ELEMS_PER_MS"]

LAUNCH_MS = 0.005
COPY_BYTES_PER_MS = 2.0e6      # 2 GB/s: a 256 x 256 float32 matrix (256 KiB) takes ~0.13 ms
FLOPS_PER_MS = 3.3554432e7     # a 256^3 product (2 * 256^3 flop) takes exactly 1 ms
ELEMS_PER_MS = 6.5536e5        # an element-wise op on 256 x 256 takes 0.1 ms


@value_type
@dataclass(frozen=True)
class VRef:
    """A value living on virtual device ``device``; ready at virtual time ``ready_ms``."""

    device: int
    key: int


@dataclass
class VirtualClock:
    """The host's clock and everything the devices recorded, shared by one set of devices."""

    host_ms: float = 0.0
    violations: list[str] = field(default_factory=list)
    log: list[tuple[str, int, str, float, float]] = field(default_factory=list)  # (kind, dev, label, t0, t1)
    devices: dict[int, "VirtualDevice"] = field(default_factory=dict, repr=False)

    def advance(self, t: float) -> None:
        self.host_ms = max(self.host_ms, t)


class VFuture:
    """Returned by ``submit``; ``result()`` makes the host wait for the task."""

    def __init__(self, device: "VirtualDevice", ref: VRef, label: str) -> None:
        self._device, self._ref, self.label = device, ref, label

    def done(self) -> bool:
        return self._device._ready[self._ref.key] <= self._device.clock.host_ms

    def result(self, timeout: float | None = None) -> VRef:
        self._device.clock.advance(self._device._ready[self._ref.key])
        return self._ref


def _nbytes(value: Any) -> int:
    return int(np.asarray(value).nbytes)


def task_cost_ms(fn: Callable, args: tuple, value: Any) -> float:
    """Virtual duration of ``fn(*args) -> value``: a product by its flops, anything else by
    the elements it touches."""
    arrays = [np.asarray(a) for a in args if isinstance(a, np.ndarray)]
    name = getattr(fn, "__name__", "")
    if name in ("matmul", "mm") and len(arrays) == 2 and arrays[0].ndim == 2 and arrays[1].ndim == 2:
        (m, k), (_, n) = arrays[0].shape, arrays[1].shape
        return 2.0 * m * k * n / FLOPS_PER_MS
    out = np.asarray(value)
    touched = sum(a.size for a in arrays) + (out.size if out.dtype != object else 0)
    if out.ndim == 2 and arrays and any(a.ndim == 2 for a in arrays) and name not in ("add", "sub"):
        # an unknown function that returns a matrix: charge it like a product of its output
        # shape, so that hiding products inside one task does not make them free
        shapes = [a.shape for a in arrays if a.ndim == 2]
        k = max(s[1] for s in shapes)
        return max(2.0 * out.shape[0] * k * out.shape[1] / FLOPS_PER_MS, touched / ELEMS_PER_MS)
    return touched / ELEMS_PER_MS


class VirtualDevice:
    """One virtual device; see the module docstring."""

    def __init__(self, index: int, clock: VirtualClock) -> None:
        self.index, self.clock = index, clock
        self.spec = f"virtual:{index}"
        self.framework = "numpy"
        self._values: dict[int, Any] = {}
        self._ready: dict[int, float] = {}
        self._free_ms = 0.0
        self._next = 0
        self.records: list[TaskRecord] = []
        self.tasks: list[tuple[str, float, float]] = []  # compute tasks: (label, start, end)

    def __repr__(self) -> str:
        return f"VirtualDevice({self.index})"

    def __str__(self) -> str:
        return self.spec

    def label(self) -> str:
        return f"{self.spec} (virtual device, deterministic clock)"

    # -- internals --------------------------------------------------------------
    def _store(self, value: Any, ready: float) -> VRef:
        self._next += 1
        self._values[self._next], self._ready[self._next] = value, ready
        return VRef(self.index, self._next)

    def _record(self, kind: str, label: str, t0: float, t1: float) -> None:
        self.records.append(TaskRecord(label, kind, int(t0 * 1e6), int(t1 * 1e6)))
        self.clock.log.append((kind, self.index, label, t0, t1))

    def _resolve(self, arg: Any, devices: dict[int, "VirtualDevice"], label: str) -> tuple[Any, float]:
        if isinstance(arg, VFuture):
            arg = arg._ref
        if isinstance(arg, VRef):
            owner = devices[arg.device]
            if arg.device != self.index:
                self.clock.violations.append(
                    f"task {label!r} on device {self.index} was given a value that lives on "
                    f"device {arg.device} (copy it first: dst.put(src.get(ref)))")
            return owner._values[arg.key], owner._ready[arg.key]
        if isinstance(arg, (list, tuple)):
            parts = [self._resolve(a, devices, label) for a in arg]
            return type(arg)(p[0] for p in parts), max([p[1] for p in parts], default=0.0)
        if isinstance(arg, np.ndarray) and arg.size > 1:
            self.clock.violations.append(
                f"task {label!r} on device {self.index} was given a host array: put it on the "
                "device first")
        return arg, 0.0

    # -- the device interface ---------------------------------------------------
    def put(self, array: Any, label: str = "put") -> VRef:
        value = np.array(array, dtype=np.float32, copy=True)
        t0 = max(self.clock.host_ms, self._free_ms)
        t1 = t0 + _nbytes(value) / COPY_BYTES_PER_MS
        self._free_ms = t1
        self.clock.advance(t1)
        self._record("copy", label, t0, t1)
        return self._store(value, t1)

    def submit(self, fn: Callable, *args: Any, keep: bool = True, label: str | None = None,
               kind: str = "compute", **kwargs: Any) -> VFuture:
        label = label or getattr(fn, "__name__", "task")
        devices = self.clock.devices
        resolved = [self._resolve(a, devices, label) for a in args]
        values = tuple(v for v, _ in resolved)
        ready = max([r for _, r in resolved], default=0.0)
        value = fn(*values, **kwargs)
        if isinstance(value, np.ndarray):
            value = value.astype(np.float32, copy=False)
        self.clock.host_ms += LAUNCH_MS
        t0 = max(self.clock.host_ms, self._free_ms, ready)
        t1 = t0 + task_cost_ms(fn, values, value)
        self._free_ms = t1
        self._record(kind, label, t0, t1)
        if kind == "compute":
            self.tasks.append((label, t0, t1))
        return VFuture(self, self._store(value, t1), label)

    def get(self, ref: Any, label: str = "get") -> np.ndarray:
        if isinstance(ref, VFuture):
            ref = ref._ref
        if not isinstance(ref, VRef):
            raise TypeError(f"get() takes what put() or submit() returned, not {type(ref).__name__}")
        if ref.device != self.index:
            self.clock.violations.append(
                f"device {self.index}.get() was asked for a value living on device {ref.device}")
        owner = self.clock.devices[ref.device]
        value = owner._values[ref.key]
        t0 = max(self.clock.host_ms, owner._ready[ref.key], owner._free_ms if owner is self else 0.0)
        t1 = t0 + _nbytes(value) / COPY_BYTES_PER_MS
        self._free_ms = max(self._free_ms, t1)
        self.clock.advance(t1)
        self._record("copy", label, t0, t1)
        return np.array(value, copy=True)

    def synchronize(self, timeout: float | None = None) -> None:
        self.clock.advance(self._free_ms)


def virtual_devices(n: int = 2) -> list[VirtualDevice]:
    """``n`` fresh virtual devices sharing one virtual clock (``devices[0].clock``)."""
    clock = VirtualClock()
    devices = [VirtualDevice(i, clock) for i in range(n)]
    clock.devices.update({d.index: d for d in devices})
    return devices
