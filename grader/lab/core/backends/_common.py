"""Pieces both adapters share that touch no framework."""
from __future__ import annotations

import os
import time
from typing import Any, Callable


def parse_spec(spec: str) -> tuple[str, int]:
    """``"cpu"`` -> ``("cpu", 0)``; ``"gpu:1"`` -> ``("gpu", 1)``. Anything else is an error."""
    if spec == "cpu":
        return "cpu", 0
    kind, _, index = spec.partition(":")
    if kind == "gpu" and index.isdigit():
        return "gpu", int(index)
    raise ValueError(f"device spec {spec!r} is not 'cpu' or 'gpu:N'")


def process_rss_bytes() -> int:
    """Resident memory of this process (what a CPU 'device' holds), from /proc where present."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: peak resident size is the best stand-in
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class HostEvent:
    """A CPU stand-in for a device event: records the host clock when ``record`` runs.

    On the CPU work is synchronous, so the moment ``record`` is called is the moment the
    preceding work finished; that is what makes this a faithful stand-in.
    """

    def __init__(self) -> None:
        self.t_ns: int | None = None

    def record(self) -> "HostEvent":
        self.t_ns = time.perf_counter_ns()
        return self

    def synchronize(self) -> None:
        if self.t_ns is None:
            raise RuntimeError("event was never recorded")

    def elapsed_ms(self, end: "HostEvent") -> float:
        if self.t_ns is None or end.t_ns is None:
            raise RuntimeError("both events must be recorded before elapsed_ms")
        return (end.t_ns - self.t_ns) / 1e6


class Event:
    """Marks a point in a device's queue; ``elapsed_ms`` between two recorded events.

    Written once for both adapters: each subclass says how to make its framework's GPU
    event (``_gpu_event``); on the CPU a :class:`HostEvent` stands in.
    """

    _gpu_event: Callable[[], Any]

    def __init__(self, device: str = "cpu") -> None:
        kind, _ = parse_spec(device)
        self._ev = type(self)._gpu_event() if kind == "gpu" else HostEvent()

    def record(self, stream: Any = None) -> "Event":
        if isinstance(self._ev, HostEvent):
            self._ev.record()
        else:
            self._ev.record(stream) if stream is not None else self._ev.record()
        return self

    def synchronize(self) -> None:
        self._ev.synchronize()

    def elapsed_ms(self, end: "Event") -> float:
        if isinstance(self._ev, HostEvent):
            return self._ev.elapsed_ms(end._ev)
        return float(self._ev.elapsed_time(end._ev))
