"""Assignment 1: does the framework run 8 independent operations in parallel?

Students write ``time_work(device, clock, fn, *args, warmup=1, repeats=3)`` and
``independent_ops_experiment(device, clock, op, x, n=8)``. The checks run them on virtual
devices (:mod:`grader.lab.sim`) whose kernels take known times, so a missing synchronize
or warm-up shows as a wrong number on every machine, every time.

This module holds what a student's notebook may import (the public checks and what
they share with the hidden ones); the graded checks are the course's, in
``exercises/hidden/a1_independent_ops.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

import numpy as np

from ..lab.sim import Kernel, virtual_devices
from .result import CheckResult
from .support import StudentError, call, failed

KERNEL_S = 0.010     # steady-state duration of the test kernel
WARMUP_S = 0.050     # first launch pays this on top
EARLIER_S = 0.200    # work queued before the student's timer starts


def _square(x):
    return x * x


def test_kernel(seconds: float = KERNEL_S, width: float = 1.0) -> Kernel:
    return Kernel("square", _square, seconds, width)


def _x() -> np.ndarray:
    return np.arange(16, dtype=np.float32).reshape(4, 4)


LONG_S = 2.0         # a kernel no wall clock would time at its virtual length


def _time_once(time_work, *, warmup_s: float, earlier_s: float, warmup: int, repeats: int,
               seconds: float = KERNEL_S) -> float:
    plan = virtual_devices(1, warmup_seconds=warmup_s)
    dev, clock = plan[0], plan.clock
    x = dev.put(_x())
    if earlier_s:
        dev.submit(Kernel("earlier_work", _square, earlier_s), x)  # queued, not waited for
    return call(time_work, dev, clock, test_kernel(seconds), x, warmup=warmup, repeats=repeats)


def _experiment(fn, auto_parallel: bool, n: int):
    plan = virtual_devices(1, warmup_seconds=WARMUP_S, auto_parallel=auto_parallel)
    dev, clock = plan[0], plan.clock
    x = dev.put(_x())
    out = call(fn, dev, clock, test_kernel(width=1.0 / n), x, n=n)
    if not isinstance(out, dict) or not {"one", "all", "parallel"} <= set(out):
        raise StudentError(f"expected a dict with keys 'one', 'all', 'parallel', got {out!r}")
    return out, dev


def public_time_work(time_work) -> CheckResult:
    """Quick feedback: time_work runs on a virtual device and returns seconds."""
    try:
        t = _time_once(time_work, warmup_s=0, earlier_s=0, warmup=1, repeats=2)
    except StudentError as e:
        return failed("time_work runs", 1, e, "fix the error above")
    if not isinstance(t, (float, int, np.floating)) or t <= 0:
        return CheckResult("time_work runs", 0, 1, "time_work must return seconds as a positive float",
                           seen=repr(t))
    return CheckResult("time_work runs", 1, 1, f"it gave {t * 1e3:.3f} ms for a "
                       f"{KERNEL_S * 1e3:.0f} ms kernel (the hidden tests check more cases)")


def public_experiment(independent_ops_experiment) -> CheckResult:
    """Quick feedback: the experiment runs and returns the dict it should."""
    try:
        out, _ = _experiment(independent_ops_experiment, False, 4)
    except StudentError as e:
        return failed("experiment runs", 1, e, "fix the error above")
    return CheckResult("experiment runs", 1, 1, f"it returned {out} on a virtual device")
