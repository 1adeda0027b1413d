"""Timing device work honestly: warm up, synchronize before every clock read, repeat,
report the median and the spread.

Device work is asynchronous: a GPU kernel launch (or a task submitted to a CPU worker)
returns before the work is done. Reading the clock without synchronizing first measures
how long it took to *queue* the work. Every timer here synchronizes the devices it is
given before each clock read; ``tests/lab/core/test_bench.py`` checks the order.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

__all__ = ["Stats", "measure", "Benchmark", "as_sync"]


def as_sync(target: Any) -> Callable[[], None]:
    """Turn what is to be synchronized into one call: None, a callable, an object with
    ``synchronize()`` (a device or a DevicePlan), or a list of those."""
    if target is None:
        return lambda: None
    if callable(target) and not hasattr(target, "synchronize"):
        return target
    if hasattr(target, "synchronize"):
        return target.synchronize
    if isinstance(target, Iterable):
        calls = [as_sync(t) for t in target]
        return lambda: [c() for c in calls] and None
    raise TypeError(f"don't know how to synchronize {target!r}")


@dataclass
class Stats:
    """Repeated measurements of one thing, in seconds."""

    label: str
    samples: list[float]
    warmup: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def spread(self) -> float:
        """Max minus min of the repeats: how far to trust the median."""
        return self.max - self.min

    def throughput(self, work: float, unit: str = "GFLOP/s", scale: float = 1e9) -> str:
        return f"{work / self.median / scale:.1f} {unit}"

    def __str__(self) -> str:
        n = len(self.samples)
        if n == 1:
            return f"{self.label}: {self.median:.4f} s (1 run, warm-up {self.warmup})"
        return (f"{self.label}: {self.median:.4f} s (median of {n}, "
                f"range {self.min:.4f}-{self.max:.4f}, warm-up {self.warmup})")


def measure(fn: Callable[[], Any], label: str = "run", *, sync: Any = None, warmup: int = 1,
            repeats: int = 5, clock: Callable[[], float] = time.perf_counter) -> Stats:
    """Time ``fn()``: ``warmup`` untimed runs, then ``repeats`` timed runs, each bracketed by
    a synchronize of ``sync`` before the clock is read."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    synchronize = as_sync(sync)
    for _ in range(warmup):
        fn()
    synchronize()
    samples = []
    for _ in range(repeats):
        synchronize()  # nothing queued earlier may leak into this measurement
        t0 = clock()
        fn()
        synchronize()  # the work must be done, not just queued
        samples.append(clock() - t0)
    return Stats(label, samples, warmup)


@dataclass
class Benchmark:
    """``with Benchmark("GPU1 time", sync=device):`` times the block once, like d2l's, but
    synchronizes ``sync`` on entry and before reading the clock on exit."""

    label: str = "Done"
    sync: Any = None
    verbose: bool = True
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)
    elapsed: float = float("nan")

    def __enter__(self) -> "Benchmark":
        self._sync = as_sync(self.sync)
        self._sync()
        self._t0 = self.clock()
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self._sync()
        self.elapsed = self.clock() - self._t0
        if self.verbose and exc_type is None:
            print(f"{self.label}: {self.elapsed:.4f} s")
