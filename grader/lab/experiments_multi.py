"""Experiments of the chapter on parallel computation on several devices
(``chapters/multidevice.md``).

The seed's workload is 50 products of a 4000 x 4000 float32 matrix on each device. On a
GPU that is what runs. On a CPU a 4000 x 4000 product is 128 GFLOP, about a second on
one core here, so the seed's full workload would take minutes per run: :func:`workload_size`
scales it down and says so.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .bench import Stats, measure
from .timeline import Timeline
from .workloads import matmul_last

__all__ = ["SEED_N", "SEED_PRODUCTS", "workload_size", "memory_plan", "MultiResult",
           "two_devices", "SmallOpsResult", "small_ops", "StreamQueue"]

SEED_N, SEED_PRODUCTS = 4000, 50
CPU_N, CPU_PRODUCTS = 1024, 12


def workload_size(simulated: bool, tiny: bool = False) -> tuple[int, int, str]:
    """``(n, products, why)`` for the devices an experiment got."""
    if tiny:
        return 64, 4, "tiny sizes (a smoke test of the code, not a measurement)"
    if not simulated:
        return SEED_N, SEED_PRODUCTS, "the seed's sizes (GPUs)"
    flop = 2 * SEED_N ** 3 * SEED_PRODUCTS
    return CPU_N, CPU_PRODUCTS, (
        f"scaled down from the seed's {SEED_PRODUCTS} x {SEED_N}^2 ({flop / 1e12:.1f} TFLOP per "
        f"device, minutes on one CPU core) so that each run takes a fraction of a second")


def memory_plan(n: int, products: int, itemsize: int = 4) -> dict[str, int]:
    """Bytes one device holds for ``products`` products of an ``n x n`` matrix.

    ``keep_all`` is the seed's ``run`` (a list of every result); ``keep_last`` is
    :func:`grader.lab.workloads.matmul_last` (the input, the result being written and the
    previous result, which is freed once the new one is assigned).
    """
    m = n * n * itemsize
    return {"matrix": m, "keep_all": m * (products + 1), "keep_last": 3 * m}


@dataclass
class MultiResult:
    """One device, the other, and both at once, each timed with warm-up and synchronize."""

    first: Stats
    second: Stats
    both: Stats
    timeline: Timeline
    overlap_s: float
    n: int
    products: int

    @property
    def sum_s(self) -> float:
        return self.first.median + self.second.median

    @property
    def speedup(self) -> float:
        """One after the other (the sum) over both at once."""
        return self.sum_s / self.both.median

    @property
    def ideal(self) -> float:
        """Both at once can at best take as long as the slower device alone."""
        return self.sum_s / max(self.first.median, self.second.median)

    def report(self) -> str:
        return "\n".join([
            f"{self.products} products of {self.n} x {self.n} float32 per device",
            f"  {self.first}", f"  {self.second}", f"  {self.both}",
            f"  sum of the two alone {self.sum_s:.4f} s; both at once {self.both.median:.4f} s",
            f"  speedup {self.speedup:.2f}x against an ideal of {self.ideal:.2f}x "
            f"({100 * self.speedup / self.ideal:.0f}% of ideal)",
        ])


def two_devices(devices: Sequence[Any], data: np.ndarray, products: int, repeats: int = 3,
                title: str = "") -> MultiResult:
    """The seed's experiment: ``products`` products on device 1, on device 2, and on both
    at once (queued on both, then one synchronize each), after a warm-up."""
    d1, d2 = devices[0], devices[1]
    x1, x2 = d1.put(data), d2.put(data)
    for d, x in ((d1, x1), (d2, x2)):  # warm-up: first calls pay one-off set-up costs
        d.submit(matmul_last, x, 1)
    for d in (d1, d2):
        d.synchronize()

    def both() -> None:
        d1.submit(matmul_last, x1, products, label="device 1")
        d2.submit(matmul_last, x2, products, label="device 2")

    first = measure(lambda: d1.submit(matmul_last, x1, products), f"{d1} alone", sync=d1,
                    warmup=0, repeats=repeats)
    second = measure(lambda: d2.submit(matmul_last, x2, products), f"{d2} alone", sync=d2,
                     warmup=0, repeats=repeats)
    together = measure(both, "both at once", sync=[d1, d2], warmup=0, repeats=repeats)
    # One more run of both, drawn from the timestamps the devices recorded.
    since = time.perf_counter_ns()
    both()
    d1.synchronize()
    d2.synchronize()
    tl = Timeline.from_devices([d1, d2], title, since_ns=since)
    return MultiResult(first, second, together, tl, tl.overlap(str(d1), str(d2)),
                       data.shape[0], products)


@dataclass
class SmallOpsResult:
    """Exercise 2 of the seed: the same independent products on one machine's cores, run
    one at a time with every core on each (intra-op), or two at a time with a core each."""

    n: int
    count: int
    one_at_a_time: Stats
    two_at_a_time: Stats

    @property
    def speedup(self) -> float:
        return self.one_at_a_time.median / self.two_at_a_time.median


def small_ops(whole: Any, halves: Sequence[Any], n: int, count: int, repeats: int = 3,
              seed: int = 0) -> SmallOpsResult:
    """``count`` independent ``n x n`` products on the same cores, two ways.

    ``whole`` is one device that owns all the cores (each product uses them all);
    ``halves`` are two devices sharing the same cores (a CPU worker with one core each,
    or two streams on one GPU): each runs half the products, both at once.
    """
    data = np.random.default_rng(seed).standard_normal((n, n), dtype=np.float32)
    x = whole.put(data)
    xs = [d.put(data) for d in halves]
    whole.submit(matmul_last, x, 2)
    for d, xi in zip(halves, xs):
        d.submit(matmul_last, xi, 2)
    whole.synchronize()
    for d in halves:
        d.synchronize()

    def split() -> None:
        for d, xi in zip(halves, xs):
            d.submit(matmul_last, xi, count // len(halves))

    one = measure(lambda: whole.submit(matmul_last, x, count), "one at a time, all cores each",
                  sync=whole, warmup=0, repeats=repeats)
    two = measure(split, f"{len(halves)} at a time, one share of the cores each", sync=list(halves),
                  warmup=0, repeats=repeats)
    return SmallOpsResult(n, count, one, two)


class StreamQueue:
    """One stream of one device as a queue with the device interface (``put``, ``submit``,
    ``synchronize``): two of them on one GPU run independent work at the same time. On the
    CPU the stream is ``None`` and work runs in this process, one task after the other."""

    def __init__(self, framework: str, spec: str, stream: Any) -> None:
        from .backends import get_backend

        self.framework, self.spec, self.stream = framework, spec, stream
        self.be = get_backend(framework)

    def __str__(self) -> str:
        return f"{self.spec} stream {id(self.stream) if self.stream is not None else 'default'}"

    def put(self, array: np.ndarray) -> Any:
        return self.be.from_numpy(array, self.spec)

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with self.be.use_stream(self.stream):
            return fn(*args)

    def synchronize(self) -> None:
        self.be.synchronize(self.spec)


def render_recorded(two: dict, result: dict) -> str:
    """A recorded ``two_devices`` result (see ``grader.gpu_check``)."""
    return (f"  {result['products']} products of {result['n']} x {result['n']} float32 per device: "
            f"alone {two['first']['median_s']:.4f} s and {two['second']['median_s']:.4f} s, "
            f"both at once {two['both']['median_s']:.4f} s; speedup {two['speedup']:.2f}x "
            f"against an ideal of {two['ideal']:.2f}x")


def render_recorded_small(rows: list, result: dict) -> str:
    return "\n".join(f"  {r['count']} products of {r['n']} x {r['n']} ({r['setting']}): "
                     f"one at a time {r['one_at_a_time']['median_s'] * 1e3:.2f} ms, "
                     f"two at a time {r['two_at_a_time']['median_s'] * 1e3:.2f} ms, "
                     f"speedup {r['speedup']:.2f}x" for r in rows)
