"""Hidden checks of assignment 2 (the public ones: ``grader.checks.a2_small_ops``)."""
from __future__ import annotations

import numpy as np

from grader.checks.a2_small_ops import (SMALL_S, WARMUP_S, _device, _ms, large_kernel,
                                        small_kernel)
from grader.checks.result import CheckResult
from grader.checks.support import StudentError, call, close, failed, result

__all__ = ["check_time_on_streams", "check_speedups"]


def check_time_on_streams(time_on_streams, n_ops: int = 8) -> CheckResult:
    """4 points: 4 streams of small kernels take n/4 kernel times (2: needs streams and
    synchronize), one stream takes n (1), a cold device is warmed up first (1)."""
    name = "time_on_streams"
    try:
        d, c = _device()
        four = call(time_on_streams, d, c, small_kernel(), d.put(np.zeros(4, np.float32)), n_ops, 4)
        d, c = _device()
        one = call(time_on_streams, d, c, small_kernel(), d.put(np.zeros(4, np.float32)), n_ops, 1)
    except StudentError as e:
        return failed(name, 4, e)
    exp4, exp1 = n_ops / 4 * SMALL_S, n_ops * SMALL_S
    hint4 = ("submit() returns at once: synchronize before reading the clock"
             if isinstance(four, (int, float)) and four < SMALL_S else
             "put operation i on stream i % n_streams: device.submit(op, x, stream=i % n_streams)"
             if close(four, exp1) else
             "warm up once, synchronize, then time all n_ops launches and synchronize")
    # A missing warm-up adds WARMUP_S to a time: it loses the warm-up point only.
    ok4 = close(four, exp4) or close(four, exp4 + WARMUP_S)
    ok1 = close(one, exp1) or close(one, exp1 + WARMUP_S)
    parts = [
        (2, ok4, f"{n_ops} small operations on 4 streams",
         f"{exp4 * 1e3:.0f} ms (4 fit on the device at once)", _ms(four), hint4),
        (1, ok1, f"{n_ops} small operations on 1 stream",
         f"{exp1 * 1e3:.0f} ms", _ms(one), "with one stream the operations run one after another"),
        (1, all(isinstance(t, (int, float, np.floating)) and t >= SMALL_S for t in (four, one))
         and not any(close(t, e + WARMUP_S) for t in (four, one) for e in (exp4, exp1)),
         "a cold device was timed",
         f"no {WARMUP_S * 1e3:.0f} ms first-launch cost in the time", f"{_ms(four)}, {_ms(one)}",
         "launch the operation once and synchronize before you start the clock"),
    ]
    return result(name, 4, parts, f"{n_ops} small ops: {_ms(four)} on 4 streams, {_ms(one)} on 1")


def check_speedups(stream_speedups, n_ops: int = 8) -> CheckResult:
    """4 points: the speedup of 4 streams over 1 is about 4 for small kernels (2) and
    about 1 for large ones (2)."""
    name = "stream_speedups"
    try:
        d, c = _device()
        out = call(stream_speedups, d, c, small_kernel(), large_kernel(),
                   d.put(np.zeros(4, np.float32)), n_ops, 4)
    except StudentError as e:
        return failed(name, 4, e)
    if not isinstance(out, dict) or not {"small", "large"} <= set(out):
        return CheckResult(name, 0, 4, "expected a dict with keys 'small' and 'large'", seen=repr(out))
    fmt = lambda v: f"{float(v):.2f}x" if isinstance(v, (int, float, np.floating)) else repr(v)
    parts = [
        (2, close(out["small"], 4.0, 0.1), "speedup of 4 streams for small operations",
         "about 4x (each fills a quarter of the device)", fmt(out["small"]),
         "speedup = time on 1 stream / time on n_streams streams"),
        (2, close(out["large"], 1.0, 0.1), "speedup of 4 streams for large operations",
         "about 1x (each fills the device)", fmt(out["large"]),
         "speedup = time on 1 stream / time on n_streams streams, measured like the small case"),
    ]
    return result(name, 4, parts, f"small {fmt(out['small'])}, large {fmt(out['large'])}: "
                  "streams help only when operators leave the device idle")
