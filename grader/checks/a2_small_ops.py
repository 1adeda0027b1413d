"""Assignment 2: parallelism helps on one device when operators are small.

Students write ``time_on_streams(device, clock, op, x, n_ops, n_streams)`` and
``stream_speedups(device, clock, small_op, large_op, x, n_ops, n_streams)``. On the virtual
device a kernel fills a known fraction of the device (``Kernel.width``): four kernels of
width 1/4 fit side by side on four streams, kernels of width 1 never do.

This module holds what a student's notebook may import (the public checks and what
they share with the hidden ones); the graded checks are the course's, in
``exercises/hidden/a2_small_ops.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

import numpy as np

from ..lab.sim import Kernel, virtual_devices
from .result import CheckResult
from .support import StudentError, call, failed

SMALL_S, LARGE_S = 0.004, 0.010
WARMUP_S = 0.050


def _inc(x):
    return x + 1


def small_kernel() -> Kernel:
    return Kernel("small_op", _inc, SMALL_S, width=0.25)


def large_kernel() -> Kernel:
    return Kernel("large_op", _inc, LARGE_S, width=1.0)


def _device(warmup: float = WARMUP_S):
    plan = virtual_devices(1, warmup_seconds=warmup)
    return plan[0], plan.clock


def _ms(t) -> str:
    return f"{float(t) * 1e3:.3f} ms" if isinstance(t, (int, float, np.floating)) else repr(t)


def public_time_on_streams(time_on_streams) -> CheckResult:
    try:
        d, c = _device(warmup=0)
        t = call(time_on_streams, d, c, small_kernel(), d.put(np.zeros(4, np.float32)), 4, 2)
    except StudentError as e:
        return failed("time_on_streams runs", 1, e, "fix the error above")
    if not isinstance(t, (float, int, np.floating)) or t <= 0:
        return CheckResult("time_on_streams runs", 0, 1, "time_on_streams must return seconds "
                           "as a positive float", seen=repr(t))
    return CheckResult("time_on_streams runs", 1, 1, f"{_ms(t)} for 4 small ops on 2 streams")


def public_speedups(stream_speedups) -> CheckResult:
    try:
        d, c = _device(warmup=0)
        out = call(stream_speedups, d, c, small_kernel(), large_kernel(),
                   d.put(np.zeros(4, np.float32)), 4, 2)
    except StudentError as e:
        return failed("stream_speedups runs", 1, e, "fix the error above")
    if not isinstance(out, dict) or not {"small", "large"} <= set(out):
        return CheckResult("stream_speedups runs", 0, 1, "return a dict with keys 'small' and 'large'",
                           seen=repr(out))
    return CheckResult("stream_speedups runs", 1, 1, f"it returned {out} (2 streams, 4 ops)")
