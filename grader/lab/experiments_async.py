"""Experiments of the chapter on asynchronous execution (``chapters/async.md``).

Each function takes a device from :func:`grader.lab.get_devices` (a GPU, the host CPU or
a CPU worker process) and runs the same code on any of them; ``grader.gpu_check`` runs
them on GPUs and the chapter on whatever the build machine has.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .bench import Stats, measure
from .timeline import Timeline
from .workloads import matmul_last

__all__ = ["threads_scaling", "TimingPitfalls", "timing_pitfalls", "queue_timeline"]


def threads_scaling(x: Any, framework: str, threads: tuple[int, ...] = (1, 2),
                    repeats: int = 5) -> dict[int, float]:
    """Median seconds of one product ``x @ x`` with each intra-op thread count.

    Runs where ``x`` lives (send it to a CPU worker that owns all cores): one operator
    spreads over every thread it is given.
    """
    from .backends import get_backend

    be = get_backend(framework)
    before = be.get_num_threads()
    out: dict[int, float] = {}
    try:
        for t in threads:
            be.set_num_threads(t)
            x @ x  # warm-up at this thread count (thread pools start lazily)
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                x @ x
                samples.append(time.perf_counter() - t0)
            out[t] = float(np.median(samples))
    finally:
        be.set_num_threads(before)
    return out


@dataclass
class TimingPitfalls:
    """Three clocks of the same work: cold, not synchronized, and done right."""

    cold_s: float          # first call, synchronized: includes one-off set-up costs
    unsynced_s: float      # warm, clock read right after queuing (no synchronize)
    synced: Stats          # warm-up, synchronize before each clock read, repeats
    products: int
    n: int

    @property
    def flop(self) -> float:
        return 2.0 * self.n ** 3 * self.products

    def report(self) -> str:
        med = self.synced.median
        return "\n".join([
            f"{self.products} products of {self.n} x {self.n} float32 "
            f"({self.flop / 1e9:.2f} GFLOP in all)",
            f"  first call (cold, synchronized) : {self.cold_s * 1e3:9.2f} ms",
            f"  warm, no synchronize            : {self.unsynced_s * 1e3:9.2f} ms"
            f"   <- only the time to queue the work",
            f"  warm, synchronized (median)     : {med * 1e3:9.2f} ms"
            f"   ({self.synced.throughput(self.flop)})",
        ])


def timing_pitfalls(device: Any, data: np.ndarray, products: int, repeats: int = 5) -> TimingPitfalls:
    """Time ``products`` products on ``device`` three ways (see :class:`TimingPitfalls`).

    ``data`` must not have been on this device before, so the first call is really cold
    (a fresh worker: its first product pays the math library's set-up; a GPU: the first
    kernel pays the context and the library handle).
    """
    x = device.put(data)
    t0 = time.perf_counter()
    device.submit(matmul_last, x, products)
    device.synchronize()
    cold = time.perf_counter() - t0

    device.synchronize()
    t0 = time.perf_counter()
    device.submit(matmul_last, x, products)  # queued ...
    unsynced = time.perf_counter() - t0      # ... and the clock read before it is done
    device.synchronize()

    synced = measure(lambda: device.submit(matmul_last, x, products), f"{device}", sync=device,
                     warmup=1, repeats=repeats)
    return TimingPitfalls(cold, unsynced, synced, products, data.shape[0])


def queue_timeline(device: Any, data: np.ndarray, products: int, tasks: int = 4,
                   title: str = "") -> tuple[Timeline, float, float]:
    """Queue ``tasks`` tasks from the host and let the device clock them.

    Returns the timeline (a host row: how long each ``submit`` call took; a device row:
    when each task ran), the moment the host was free again and the moment the device
    finished, both in seconds after the first submit.
    """
    x = device.put(data)
    device.submit(matmul_last, x, 1)
    device.synchronize()  # warm: this timeline is about queuing, not set-up
    since = time.perf_counter_ns()
    tl = Timeline(title)
    for i in range(tasks):
        t0 = time.perf_counter_ns()
        device.submit(matmul_last, x, products, label=f"task {i}")
        tl.add("host", t0 / 1e9, time.perf_counter_ns() / 1e9, "other", f"submit {i}")
    host_free = time.perf_counter_ns()
    device.synchronize()
    tl.add_records(str(device), [r for r in device.records if r.start_ns >= since])
    dev_done = max(r.end_ns for r in device.records if r.start_ns >= since)
    return tl, (host_free - since) / 1e9, (dev_done - since) / 1e9


def render_recorded(timing: dict, result: dict) -> str:
    """A recorded ``timing`` result (see ``grader.gpu_check``) as three lines."""
    return "\n".join([
        f"  {result['products']} products of {result['n']} x {result['n']} float32",
        f"  first call (cold, synchronized) : {timing['cold_s'] * 1e3:9.2f} ms",
        f"  warm, no synchronize            : {timing['unsynced_s'] * 1e3:9.2f} ms",
        f"  warm, synchronized (median)     : {timing['synced']['median_s'] * 1e3:9.2f} ms",
    ])
