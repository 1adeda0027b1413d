"""Deterministic virtual devices: a virtual clock and kernels and copies of known length.

A :class:`SimDevice` offers the interface of :mod:`grader.lab.devices` (``put``, ``submit``,
``get``, ``synchronize``, ``records``) but nothing really runs in parallel: every task is
computed at once with NumPy, and *when* it would start and end on a GPU is worked out on a
virtual clock from durations fixed in advance. Time only moves when the host does
something (a launch costs ``launch_seconds``) or waits (``synchronize``, ``get``, a
future's ``result``). So the same code gives the same times on every machine, every run.

It models what a GPU does and what timing code gets wrong:

- ``submit`` returns before the work is done; reading the clock without synchronizing
  measures the launches only;
- the first launch of a kernel on a device pays ``warmup_seconds`` (allocation, kernel
  selection, caches), so a measurement without a warm-up is too long;
- a device has a compute engine with streams (``submit(..., stream=i)``) and a copy
  engine; kernels on different streams run together when their ``width`` (the fraction
  of the device they fill) allows, so small kernels gain from streams and large ones do
  not; ``auto_parallel=True`` puts every independent task on its own stream (a framework
  that schedules a graph);
- ``copy_to_host(value, non_blocking=True)`` returns a :class:`HostBuffer` at once; read
  before the copy has landed it holds NaN (on a GPU: whatever the memory held before);
- ``copy_to(value, other_device)`` moves a value over the link between two devices.

Chapters use it to show what a GPU would do; the exercises' hidden tests run students'
functions against it (``grader.checks``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from .workers import TaskRecord

__all__ = ["VirtualClock", "Kernel", "SimValue", "HostBuffer", "SimDevice", "SimPlan",
           "virtual_devices", "kernel", "matmul", "span"]

_NS = 1_000_000_000


def _ns(seconds: float) -> int:
    return int(round(seconds * _NS))


class VirtualClock:
    """A clock that moves only when told to. Call it like ``time.perf_counter``."""

    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> float:
        return self.now_ns / _NS

    perf_counter = __call__

    def advance_to(self, t_ns: int) -> None:
        self.now_ns = max(self.now_ns, int(t_ns))

    def advance(self, seconds: float) -> None:
        """Time passes on the host (``seconds`` >= 0): a clock never runs backwards, so code
        under test cannot make its own work look shorter."""
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward (advance by {seconds!r} s)")
        self.now_ns += _ns(seconds)


@dataclass(frozen=True)
class Kernel:
    """An operation of known cost: ``fn`` computes the value (NumPy, or anything written
    with operators that NumPy, PyTorch and Paddle share), ``seconds`` is its steady-state
    duration on a device, ``width`` the fraction of the device it fills (0 < width <= 1).
    Calling a kernel just calls ``fn``, so the same kernel runs on real devices too."""

    name: str
    fn: Callable[..., Any]
    seconds: float
    width: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.width <= 1:
            raise ValueError(f"kernel {self.name}: width {self.width} outside (0, 1]")
        if self.seconds < 0:
            raise ValueError(f"kernel {self.name}: negative duration")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def kernel(seconds: float, width: float = 1.0, name: str | None = None) -> Callable:
    """Decorator: ``@kernel(0.01)`` turns a function into a :class:`Kernel`."""
    def wrap(fn: Callable) -> Kernel:
        return Kernel(name or fn.__name__, fn, seconds, width)
    return wrap


class SimValue:
    """A value on a virtual device; also the future that ``submit`` returns."""

    def __init__(self, device: "SimDevice", value: Any, ready_ns: int) -> None:
        self.device, self._value, self.ready_ns = device, value, ready_ns

    def done(self) -> bool:
        return self.device.clock.now_ns >= self.ready_ns

    def result(self, timeout: float | None = None) -> "SimValue":
        """Wait (on the virtual clock) until the value is computed; return it as a handle."""
        self.device.clock.advance_to(self.ready_ns)
        return self

    def __repr__(self) -> str:
        return f"SimValue(on {self.device.spec}, ready at {self.ready_ns / 1e6:.3f} ms)"


class HostBuffer:
    """Host memory that an asynchronous copy is writing into."""

    def __init__(self, device: "SimDevice", value: np.ndarray, ready_ns: int) -> None:
        self.device, self._value, self.ready_ns = device, np.asarray(value), ready_ns

    def done(self) -> bool:
        return self.device.clock.now_ns >= self.ready_ns

    def wait(self) -> "HostBuffer":
        self.device.clock.advance_to(self.ready_ns)
        return self

    def numpy(self) -> np.ndarray:
        """The buffer's content *now*: the copied value once the copy has landed, NaN before."""
        if self.done():
            return self._value.copy()
        return np.full(self._value.shape, np.nan, dtype=np.float64 if self._value.dtype.kind != "f"
                       else self._value.dtype)

    __array__ = lambda self, dtype=None, copy=None: np.asarray(self.numpy(), dtype=dtype)


@dataclass
class _Busy:
    start: int
    end: int
    width: float


@dataclass
class SimDevice:
    """A virtual device (see the module docstring). All times are in seconds."""

    spec: str = "sim:0"
    clock: VirtualClock = field(default_factory=VirtualClock)
    launch_seconds: float = 10e-6      # host time to queue one task
    warmup_seconds: float = 0.05       # extra on the first launch of each kernel
    default_seconds: float = 1e-3      # duration of a function that is not a Kernel
    bandwidth: float = 10e9            # bytes/s of the copy engine (host <-> device, links)
    copy_latency: float = 10e-6
    auto_parallel: bool = False
    framework: str = "numpy"

    def __post_init__(self) -> None:
        self._records: list[TaskRecord] = []
        self._compute: list[_Busy] = []
        self._stream_free: dict[Any, int] = {}
        self._copy_free = 0
        self._seen: set[str] = set()
        self._auto = 0

    # -- the device interface ---------------------------------------------------
    @property
    def records(self) -> list[TaskRecord]:
        """Tasks that have *finished* by now on the virtual clock (like GPU events, which
        can be read only once they have happened): synchronize first to see them all."""
        now = self.clock.now_ns
        return [r for r in self._records if r.end_ns <= now]

    simulated = True

    def label(self) -> str:
        return f"{self.spec} (virtual device, deterministic clock)"

    def __str__(self) -> str:
        return self.spec

    def put(self, array: Any, label: str = "put") -> SimValue:
        """Copy a host array onto the device; returns when the copy is done (pageable memory)."""
        value = np.array(array, copy=True)
        end = self._copy(value.nbytes, [], label)
        self.clock.advance_to(end)
        return SimValue(self, value, end)

    def submit(self, fn: Callable, *args: Any, keep: bool = True, label: str | None = None,
               kind: str = "compute", stream: Any = 0, **kwargs: Any) -> SimValue:
        """Queue ``fn(*args)``; returns at once. Arguments that are :class:`SimValue` s are
        dependencies: the task starts after they are ready."""
        deps = [a for a in list(args) + list(kwargs.values()) if isinstance(a, SimValue)]
        for d in deps:
            if d.device is not self:
                raise ValueError(f"{label or fn}: argument lives on {d.device.spec}, not on "
                                 f"{self.spec}; copy it over first (copy_to)")
        raw = [a._value if isinstance(a, SimValue) else a for a in args]
        rawkw = {k: (v._value if isinstance(v, SimValue) else v) for k, v in kwargs.items()}
        value = fn(*raw, **rawkw)
        name = getattr(fn, "name", None) or getattr(fn, "__name__", "task")
        seconds = fn.seconds if isinstance(fn, Kernel) else self.default_seconds
        width = fn.width if isinstance(fn, Kernel) else 1.0
        if name not in self._seen:
            self._seen.add(name)
            seconds += self.warmup_seconds
        self.clock.advance(self.launch_seconds)
        if kind == "copy":
            end = self._copy(int(getattr(value, "nbytes", 0)), deps, label or name)
        else:
            if self.auto_parallel and stream == 0:
                self._auto += 1
                stream = ("auto", self._auto)
            end = self._run(stream, _ns(seconds), width, deps, label or name, kind)
        return SimValue(self, value if keep else None, end)

    def get(self, value: Any, label: str = "get") -> np.ndarray:
        """Copy a value back to the host, waiting for it and for the copy (like ``.cpu()``)."""
        value = self._own(value)
        end = self._copy(_nbytes(value._value), [value], label)
        self.clock.advance_to(end)
        return np.array(value._value, copy=True)

    def copy_to_host(self, value: SimValue, non_blocking: bool = True,
                     label: str = "copy_to_host") -> HostBuffer:
        """Copy to host memory on the copy engine, after ``value`` is ready. With
        ``non_blocking=True`` this returns at once and the buffer fills later."""
        value = self._own(value)
        self.clock.advance(self.launch_seconds)
        end = self._copy(_nbytes(value._value), [value], label)
        buf = HostBuffer(self, np.array(value._value, copy=True), end)
        return buf if non_blocking else buf.wait()

    def copy_to(self, value: SimValue, dst: "SimDevice", label: str = "copy") -> SimValue:
        """Send a value to another virtual device over the link (both copy engines busy)."""
        value = self._own(value)
        if dst.clock is not self.clock:
            raise ValueError("devices on different clocks cannot exchange data")
        self.clock.advance(self.launch_seconds)
        start = max(self.clock.now_ns, self._copy_free, dst._copy_free, value.ready_ns)
        end = start + _ns(self.copy_latency + _nbytes(value._value) / self.bandwidth)
        self._copy_free = dst._copy_free = end
        self._records.append(TaskRecord(label, "copy", start, end))
        dst._records.append(TaskRecord(label, "copy", start, end))
        return SimValue(dst, np.array(value._value, copy=True), end)

    def synchronize(self, timeout: float | None = None) -> None:
        self.clock.advance_to(self.busy_until())

    def busy_until(self) -> int:
        ends = [b.end for b in self._compute] + [self._copy_free]
        return max(ends) if ends else 0

    # -- scheduling -------------------------------------------------------------
    def _own(self, value: Any) -> SimValue:
        if not isinstance(value, SimValue):
            raise TypeError(f"expected a value on {self.spec} (what put/submit return), got "
                            f"{type(value).__name__}")
        if value.device is not self:
            raise ValueError(f"value lives on {value.device.spec}, not on {self.spec}")
        return value

    def _copy(self, nbytes: int, deps: list[SimValue], label: str) -> int:
        start = max([self.clock.now_ns, self._copy_free] + [d.ready_ns for d in deps])
        end = start + _ns(self.copy_latency + nbytes / self.bandwidth)
        self._copy_free = end
        self._records.append(TaskRecord(label, "copy", start, end))
        return end

    def _run(self, stream: Any, duration: int, width: float, deps: list[SimValue],
             label: str, kind: str) -> int:
        earliest = max([self.clock.now_ns, self._stream_free.get(stream, 0)]
                       + [d.ready_ns for d in deps])
        # Earliest start at which the kernel fits beside what is already running: the load
        # only changes at interval boundaries, so those are the candidates.
        candidates = sorted({earliest} | {b.end for b in self._compute if b.end > earliest})
        for t in candidates:
            lo, hi = t, t + max(duration, 1)
            points = [lo] + [b.start for b in self._compute if lo < b.start < hi]
            if all(sum(b.width for b in self._compute if b.start <= p < b.end) + width <= 1 + 1e-9
                   for p in points):
                start = t
                break
        end = start + duration
        self._compute.append(_Busy(start, end, width))
        self._stream_free[stream] = end
        self._records.append(TaskRecord(label, kind, start, end))
        return end


def _nbytes(value: Any) -> int:
    return int(getattr(value, "nbytes", 0) or np.asarray(value).nbytes)


@dataclass
class SimPlan:
    """Virtual devices sharing one clock; reads like a :class:`~grader.lab.DevicePlan`."""

    devices: list[SimDevice]
    clock: VirtualClock
    kind: str = "virtual"

    simulated = True

    def __iter__(self):
        return iter(self.devices)

    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, i: int) -> SimDevice:
        return self.devices[i]

    def describe(self) -> str:
        return (f"{len(self)} virtual device(s) with a deterministic clock (grader.lab.sim): "
                "times are what the cost model says, not measurements")

    def synchronize(self) -> None:
        for d in self.devices:
            d.synchronize()

    def records(self) -> dict[str, list[TaskRecord]]:
        return {d.spec: list(d.records) for d in self.devices}


def virtual_devices(n: int = 1, verbose: bool = False, **options: Any) -> SimPlan:
    """``n`` virtual devices on one :class:`VirtualClock`; ``options`` go to each
    :class:`SimDevice` (``warmup_seconds``, ``bandwidth``, ``auto_parallel``, ...)."""
    clock = VirtualClock()
    plan = SimPlan([SimDevice(f"sim:{i}", clock, **options) for i in range(n)], clock)
    if verbose:
        print(plan.describe())
    return plan


def span(records: Iterable[TaskRecord]) -> float:
    """Seconds from the first start to the last end of ``records``."""
    rs = list(records)
    return (max(r.end_ns for r in rs) - min(r.start_ns for r in rs)) / _NS if rs else 0.0


def matmul(x):
    """``x @ x``: a kernel body for real devices too (``Kernel("matmul", matmul, s)``)."""
    return x @ x
