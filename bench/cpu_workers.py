"""How much two CPU workers really run in parallel: speedup over serial, against the ideal 2.0.

    .venv/bin/python bench/cpu_workers.py [--size 768] [--count 20] [--repeats 5]

The same work (``count`` products of a ``size`` x ``size`` float32 matrix) is done twice:
serially on one worker, and once on each of two workers at the same time. Each worker has
one core (``grader.lab.get_devices``). For comparison, two *threads* of one process do the
same two jobs (intra-op threads set to 1, so each thread gets one core's worth of BLAS),
and two threads running pure-Python work (where the GIL serializes them).
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.lab import get_backend, get_devices, measure  # noqa: E402
from grader.lab.core.threads import framework_ready  # noqa: E402
from grader.lab.core.workloads import matmul_last  # noqa: E402


def python_work(n: int) -> int:
    s = 0
    for i in range(n):
        s += i * i
    return s


def bench_framework(fw: str, size: int, count: int, repeats: int) -> dict[str, float]:
    plan = get_devices(2, fw, gpu_count=0)
    data = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    xs = [d.put(data) for d in plan]
    d0, d1 = plan[0], plan[1]

    def serial():
        d0.submit(matmul_last, xs[0], count)
        d0.submit(matmul_last, xs[0], count)

    def parallel():
        d0.submit(matmul_last, xs[0], count)
        d1.submit(matmul_last, xs[1], count)

    s = measure(serial, f"{fw} serial, one worker", sync=plan, repeats=repeats)
    p = measure(parallel, f"{fw} two workers", sync=plan, repeats=repeats)

    be = get_backend(fw)
    be.set_num_threads(1)
    x = be.from_numpy(data)
    # Paddle's eager mode is per thread: each pool thread turns it on (grader.lab.core.threads)
    with ThreadPoolExecutor(2, initializer=framework_ready) as pool:
        ts = measure(lambda: [matmul_last(x, count), matmul_last(x, count)],
                     f"{fw} serial, one thread", repeats=repeats)
        tp = measure(lambda: list(pool.map(lambda _: matmul_last(x, count), range(2))),
                     f"{fw} two threads", repeats=repeats)
    for st in (s, p, ts, tp):
        print(" ", st)
    return {"workers": s.median / p.median, "threads": ts.median / tp.median}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=768)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"work: 2 jobs of {args.count} products of a {args.size}x{args.size} float32 matrix")
    results = {fw: bench_framework(fw, args.size, args.count, args.repeats) for fw in ("torch", "paddle")}

    n = 2_000_000
    with ThreadPoolExecutor(2) as pool:
        ps = measure(lambda: [python_work(n), python_work(n)], "pure Python, serial", repeats=args.repeats)
        pp = measure(lambda: list(pool.map(python_work, [n, n])), "pure Python, two threads",
                     repeats=args.repeats)
    print(" ", ps)
    print(" ", pp)
    print("\nspeedup over serial (ideal 2.00):")
    for fw, r in results.items():
        print(f"  {fw:<7} two worker processes: {r['workers']:.2f}x ({r['workers'] / 2:.0%} of ideal)"
              f"   two threads: {r['threads']:.2f}x")
    print(f"  pure-Python work, two threads: {ps.median / pp.median:.2f}x (the GIL)")


if __name__ == "__main__":
    main()
