"""The simulated machine: a host clock, GPUs with streams, a compute engine and copy engines.

Nothing runs in parallel for real: every value is computed at once with NumPy, and *when*
it would be computed on a GPU is worked out on a :class:`VirtualClock` from a cost model
(:class:`Costs`). Time moves only when the host does something (a launch costs
``launch_s``) or waits (a synchronize, a blocking copy). So the same program gives the same
times on every machine, every run.

What it models, because it is what GPU code gets right or wrong:

- a launch returns before the work is done; work on one stream runs in order; streams of
  one device run side by side when the kernels' *widths* (the fraction of the device a
  kernel fills: small kernels leave it mostly idle) fit together;
- streams do not wait for each other unless told to (``wait_event``, ``wait_stream``): a
  kernel or copy that reads a tensor before the kernel writing it on another stream has
  finished reads garbage (NaN), and the read is recorded as a race;
- the first launch of each kind of kernel on a device pays ``warmup_s``;
- copies run on copy engines (one per direction and device) in the order of their stream;
  into or out of pageable host memory the host waits for the copy, whatever it asked; a
  non-blocking copy into pinned memory returns at once, and reading the host buffer before
  the copy has landed gives garbage (NaN) and is recorded;
- a copy between two devices waits for both devices' current streams;
- ``parallel=True``: a framework that schedules a graph: every kernel launched on a
  device's default stream runs as soon as its inputs are ready, beside the others.

The judge keeps the :class:`Machine`; the answer only ever gets the framework facade
(:mod:`.torch_api`, :mod:`.paddle_api`), whose public attributes are the framework's API.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

__all__ = ["VirtualClock", "Costs", "Machine", "Gpu", "Stream", "Event", "Op", "Violation",
           "SimError"]

_NS = 1_000_000_000


def ns(seconds: float) -> int:
    return int(round(seconds * _NS))


SimError = RuntimeError   # what the frameworks raise for a CUDA error or a bad argument


class VirtualClock:
    """A clock that moves only when told to; :meth:`read` is what an answer gets as
    ``clock`` (seconds, like ``time.perf_counter``)."""

    def __init__(self) -> None:
        self.now_ns = 0
        self.reads = 0          # how often an answer read it (the grader reads ``now_ns``)

    def read(self) -> float:
        self.reads += 1
        return self.now_ns / _NS

    __call__ = read

    def advance(self, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward (advance by {seconds!r} s)")
        self.now_ns += ns(seconds)

    def advance_to(self, t_ns: int) -> None:
        self.now_ns = max(self.now_ns, int(t_ns))


@dataclass(frozen=True)
class Costs:
    """How fast the simulated machine is (private to the judge: never handed to an answer)."""

    flops: float = 20e12          # matrix products, whole device, per second
    elems: float = 200e9          # element-wise work: elements per second, whole device
    capacity: int = 1 << 20       # output elements that keep the whole device busy
    min_kernel_s: float = 3e-6
    launch_s: float = 5e-6        # host time to queue a kernel, a copy or an event
    warmup_s: float = 0.02        # extra on the first launch of each kind of kernel
    copy_bw: float = 20e9         # bytes/s between host and device
    copy_latency_s: float = 10e-6
    link_bw: float = 100e9        # bytes/s between two devices
    host_elems: float = 1e9       # the host's element-wise rate (CPU tensors)
    host_flops: float = 50e9      # the host's matrix-product rate (CPU tensors)
    # Values are computed for real, on the grading machine's CPU: what one tensor may hold
    # and one operation may cost there (the exercises need far less)
    max_elems: int = 1 << 24
    max_work: float = 2.0 ** 33

    def kernel_s(self, work: float, rate: float, parallel: int) -> tuple[float, float]:
        """(seconds, width) of a kernel doing ``work`` at ``rate`` (per second, whole device)
        over ``parallel`` independent elements (its output; its input for a reduction): it
        fills ``parallel / capacity`` of the device and runs at that share of its rate."""
        width = min(1.0, max(int(parallel), 1) / self.capacity)
        return max(self.min_kernel_s, work / (rate * width)), width


@dataclass(frozen=True)
class Op:
    """One thing a device did (the judge's record; answers never see it)."""

    kind: str            # "compute" or "copy"
    name: str            # "matmul", "add", ..., "h2d", "d2h", "p2p"
    device: int
    stream: int          # the stream it was queued on (its own number in parallel mode)
    start_ns: int
    end_ns: int
    launched_ns: int     # host time when it was queued
    width: float = 1.0
    pinned: bool | None = None   # copies to or from the host: pinned host memory?
    host_waited: bool = False    # the host waited for it (a blocking or pageable copy)
    label: str = ""

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / _NS


@dataclass(frozen=True)
class Violation:
    kind: str            # "race", "early_read", "wrong_device"
    message: str
    at_ns: int


class Event:
    """A marker in a stream (judge side; the facades wrap it)."""

    def __init__(self, machine: "Machine", enable_timing: bool) -> None:
        self.machine, self.enable_timing = machine, bool(enable_timing)
        self.time_ns: int | None = None
        self.stream: "Stream | None" = None

    def record(self, stream: "Stream") -> None:
        m = self.machine
        m.clock.advance(m.costs.launch_s)
        self.stream, self.time_ns = stream, max(stream.done_ns(), m.clock.now_ns)
        stream.wait_until(self.time_ns)   # later work on the stream comes after the event

    def query(self) -> bool:
        return self.time_ns is None or self.time_ns <= self.machine.clock.now_ns

    def synchronize(self) -> None:
        if self.time_ns is not None:
            self.machine.wait_host(self.time_ns, "event.synchronize")


class Stream:
    """A queue on one device: work runs in order; ``tail_ns`` is when new work may start."""

    def __init__(self, gpu: "Gpu", number: int, priority: int = 0) -> None:
        self.gpu, self.number, self.priority = gpu, number, priority
        self.tail_ns = 0
        self.join_ns = 0          # parallel mode, default stream: end of all it dispatched

    def done_ns(self) -> int:
        return max(self.tail_ns, self.join_ns)

    def synchronize(self) -> None:
        self.gpu.machine.wait_host(self.done_ns(), "stream.synchronize")

    def query(self) -> bool:
        return self.done_ns() <= self.gpu.machine.clock.now_ns

    def wait_until(self, t_ns: int | None) -> None:
        if t_ns is not None:
            self.tail_ns = max(self.tail_ns, int(t_ns))


@dataclass
class _Busy:
    start: int
    end: int
    width: float


class Gpu:
    def __init__(self, machine: "Machine", index: int) -> None:
        self.machine, self.index = machine, index
        self.streams = [Stream(self, 0)]
        self.current = self.streams[0]
        self._busy: list[_Busy] = []
        self._engines = {"h2d": 0, "d2h": 0}
        self._seen: set[str] = set()
        self._auto = 0

    @property
    def default(self) -> Stream:
        return self.streams[0]

    def new_stream(self, priority: int = 0) -> Stream:
        s = Stream(self, len(self.streams), priority)
        self.streams.append(s)
        return s

    def done_ns(self) -> int:
        ends = [s.done_ns() for s in self.streams] + [b.end for b in self._busy]
        return max(ends + list(self._engines.values()))

    def synchronize(self) -> None:
        self.machine.wait_host(self.done_ns(), "synchronize")

    # -- kernels ----------------------------------------------------------------
    def kernel(self, name: str, seconds: float, width: float, stream: Stream,
               inputs: list[Any], label: str = "") -> tuple[int, list[bool]]:
        """Queue a kernel; returns its end and, per input tensor, whether it was ready
        (written) when the kernel started."""
        m = self.machine
        m.clock.advance(m.costs.launch_s)
        launched = m.clock.now_ns
        if name not in self._seen:
            self._seen.add(name)
            seconds += m.costs.warmup_s
        duration = max(ns(seconds), 1)
        auto = m.parallel and stream is self.default
        lower = max(launched, stream.tail_ns)
        if auto:   # a graph scheduler: wait for the inputs, not for the stream
            lower = max([lower] + [t._ready_ns for t in inputs if t._dev == self.index])
        start = self._fit(lower, duration, width)
        end = start + duration
        self._busy.append(_Busy(start, end, width))
        if auto:
            self._auto += 1
            number = -self._auto
            stream.join_ns = max(stream.join_ns, end)
        else:
            number = stream.number
            stream.tail_ns = end
        m.ops.append(Op("compute", name, self.index, number, start, end, launched, width,
                        label=label or name))
        return end, m.check_inputs(inputs, start, stream, name)

    def _fit(self, earliest: int, duration: int, width: float) -> int:
        # The earliest start at which the kernel fits beside what already runs: the load
        # only changes at interval boundaries, so those are the candidates.
        candidates = sorted({earliest} | {b.end for b in self._busy if b.end > earliest})
        for t in candidates:
            lo, hi = t, t + duration
            points = [lo] + [b.start for b in self._busy if lo < b.start < hi]
            if all(sum(b.width for b in self._busy if b.start <= p < b.end) + width <= 1 + 1e-9
                   for p in points):
                return t
        return candidates[-1]

    # -- copies -----------------------------------------------------------------
    def copy(self, direction: str, nbytes: int, stream: Stream, pinned: bool, blocking: bool,
             inputs: list[Any], label: str) -> tuple[int, list[bool]]:
        """A copy between this device and the host on ``stream``; the host waits for it
        when ``blocking`` or when the host memory is pageable."""
        m, c = self.machine, self.machine.costs
        m.clock.advance(c.launch_s)
        launched = m.clock.now_ns
        start = max(launched, stream.done_ns(), self._engines[direction])
        end = start + ns(c.copy_latency_s + nbytes / c.copy_bw)
        self._engines[direction] = end
        stream.tail_ns = max(stream.tail_ns, end)
        waits = blocking or not pinned
        m.ops.append(Op("copy", direction, self.index, stream.number, start, end, launched,
                        pinned=pinned, host_waited=waits, label=label))
        ready = m.check_inputs(inputs, start, stream, label)
        if waits:
            m.wait_host(end, f"{label} ({'pageable memory' if not pinned else 'blocking'})")
        return end, ready


class Machine:
    """The host and ``n_gpus`` simulated GPUs on one :class:`VirtualClock`."""

    def __init__(self, n_gpus: int = 1, costs: Costs | None = None, parallel: bool = False,
                 wrong_device: str = "raise") -> None:
        if wrong_device not in ("raise", "record"):
            raise ValueError("wrong_device is 'raise' or 'record'")
        self.clock = VirtualClock()
        self.costs = costs or Costs()
        self.parallel, self.wrong_device = parallel, wrong_device
        self.gpus = [Gpu(self, i) for i in range(n_gpus)]
        self.ops: list[Op] = []
        self.violations: list[Violation] = []
        self.host_waits: list[tuple[str, int, int]] = []
        self.elapsed_calls = 0      # event.elapsed_time calls (timing with events)
        self.current_device = 0

    def with_costs(self, **changes: Any) -> None:
        self.costs = replace(self.costs, **changes)

    # -- the host -----------------------------------------------------------------
    def wait_host(self, t_ns: int, reason: str) -> None:
        now = self.clock.now_ns
        if t_ns > now:
            self.host_waits.append((reason, now, int(t_ns)))
        self.clock.advance_to(t_ns)

    def host_compute(self, work: float, rate: float) -> None:
        self.clock.advance(work / rate)

    def violation(self, kind: str, message: str) -> None:
        self.violations.append(Violation(kind, message, self.clock.now_ns))

    def check_inputs(self, inputs: list[Any], start: int, stream: Stream, what: str) -> list[bool]:
        """Whether each input had been written by ``start``; a read before that is a race
        (another stream was still writing it: nothing made this stream wait)."""
        out = []
        for t in inputs:
            ok = t._ready_ns <= start
            if not ok:
                self.violation("race", f"{what} on stream {stream.number} of device "
                               f"{stream.gpu.index} read a tensor that a kernel or copy on "
                               "another stream was still writing (nothing made this stream "
                               "wait for it: wait_event / wait_stream)")
            out.append(ok)
        return out

    def p2p(self, nbytes: int, src: Gpu, dst: Gpu, blocking: bool, inputs: list[Any],
            label: str) -> tuple[int, list[bool]]:
        """A copy between two devices: after both devices' current streams (a two-way
        barrier), on the source's current stream; the destination's waits for it."""
        c = self.costs
        self.clock.advance(c.launch_s)
        launched = self.clock.now_ns
        s1, s2 = src.current, dst.current
        start = max(launched, s1.done_ns(), s2.done_ns(), src._engines["d2h"],
                    dst._engines["h2d"])
        end = start + ns(c.copy_latency_s + nbytes / c.link_bw)
        src._engines["d2h"] = dst._engines["h2d"] = end
        s1.tail_ns = max(s1.tail_ns, end)
        s2.tail_ns = max(s2.tail_ns, end)
        self.ops.append(Op("copy", "p2p", src.index, s1.number, start, end, launched,
                           host_waited=blocking, label=label))
        self.ops.append(Op("copy", "p2p", dst.index, s2.number, start, end, launched,
                           host_waited=blocking, label=label))
        ready = self.check_inputs(inputs, start, s1, label)
        if blocking:
            self.wait_host(end, label)
        return end, ready

    def synchronize_all(self) -> None:
        for g in self.gpus:
            g.synchronize()

    # -- what the judge reads -------------------------------------------------------
    def compute_ops(self, since_ns: int = 0) -> list[Op]:
        return [o for o in self.ops if o.kind == "compute" and o.launched_ns >= since_ns]

    def copy_ops(self, since_ns: int = 0) -> list[Op]:
        return [o for o in self.ops if o.kind == "copy" and o.launched_ns >= since_ns]


def garbage(value: np.ndarray) -> np.ndarray:
    """What memory holds before anything was written to it: NaN (or the smallest integer)."""
    value = np.asarray(value)
    if value.dtype.kind in "fc":
        return np.full(value.shape, np.nan, dtype=value.dtype)
    if value.dtype.kind in "iu":
        return np.full(value.shape, np.iinfo(value.dtype).min, dtype=value.dtype)
    return np.zeros(value.shape, dtype=value.dtype)
