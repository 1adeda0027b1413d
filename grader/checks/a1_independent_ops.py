"""Assignment 1: does the framework run 8 independent operations in parallel?

Students write ``time_work(device, clock, fn, *args, warmup=1, repeats=3)`` and
``independent_ops_experiment(device, clock, op, x, n=8)``. The checks run them on virtual
devices (:mod:`grader.lab.sim`) whose kernels take known times, so a missing synchronize
or warm-up shows as a wrong number on every machine, every time.
"""
from __future__ import annotations

import numpy as np

from ..lab.sim import Kernel, virtual_devices
from .result import CheckResult
from .support import StudentError, call, close, failed, result

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


def check_time_work(time_work) -> CheckResult:
    """4 points: synchronized (2), warmed up (1), clock started after earlier work (1)."""
    name, k = "time_work measures device time", KERNEL_S
    try:
        plain = _time_once(time_work, warmup_s=0, earlier_s=0, warmup=1, repeats=3)
        cold = _time_once(time_work, warmup_s=WARMUP_S, earlier_s=0, warmup=1, repeats=1)
        busy = _time_once(time_work, warmup_s=0, earlier_s=EARLIER_S, warmup=1, repeats=1)
        # The same answer for a much longer kernel: an answer that reads a real clock (not
        # the one it was given) cannot follow it, however long a call happens to take.
        long = _time_once(time_work, warmup_s=0, earlier_s=0, warmup=1, repeats=3, seconds=LONG_S)
    except StudentError as e:
        return failed(name, 4, e)
    ms = lambda t: f"{float(t) * 1e3:.3f} ms" if isinstance(t, (int, float, np.floating)) else repr(t)
    synced = close(plain, k) and close(long, LONG_S)
    parts = [
        (2, synced, "the time is not the kernel's duration", f"{k * 1e3:.0f} ms per run",
         ms(plain), "submit() returns before the work is done: call device.synchronize() "
         "before reading the clock, and read the clock you were given (clock())"
         if isinstance(plain, (int, float)) and plain < k / 2 else
         "time one run per repeat and return the median (or minimum) in seconds"),
        (1, synced and close(cold, k), "a cold device was timed", f"{k * 1e3:.0f} ms "
         f"(the first launch costs {WARMUP_S * 1e3:.0f} ms more)", ms(cold),
         "run fn once (warmup times) and synchronize before you start timing"),
        (1, synced and close(busy, k), "the clock started while earlier work was still queued",
         f"{k * 1e3:.0f} ms (work queued before the call takes {EARLIER_S * 1e3:.0f} ms)",
         ms(busy), "synchronize before the first clock read, not only after the work"),
    ]
    return result(name, 4, parts, f"synchronized, warmed up, {k * 1e3:.0f} ms measured as "
                  f"{ms(plain)}")


def _experiment(fn, auto_parallel: bool, n: int):
    plan = virtual_devices(1, warmup_seconds=WARMUP_S, auto_parallel=auto_parallel)
    dev, clock = plan[0], plan.clock
    x = dev.put(_x())
    out = call(fn, dev, clock, test_kernel(width=1.0 / n), x, n=n)
    if not isinstance(out, dict) or not {"one", "all", "parallel"} <= set(out):
        raise StudentError(f"expected a dict with keys 'one', 'all', 'parallel', got {out!r}")
    return out, dev


def check_experiment(independent_ops_experiment, n: int = 8) -> CheckResult:
    """4 points: on a device that serializes (eager execution) and on one that runs
    independent operations together (a graph scheduler), the times (1 + 1) and the verdict
    (1 + 1) are right."""
    name, k = f"experiment with {n} independent operations", KERNEL_S
    try:
        serial, _ = _experiment(independent_ops_experiment, False, n)
        par, dev = _experiment(independent_ops_experiment, True, n)
    except StudentError as e:
        return failed(name, 4, e)
    ms = lambda t: f"{float(t) * 1e3:.2f} ms" if isinstance(t, (int, float, np.floating)) else repr(t)
    ran_together = close(par["all"], k, 0.25)
    parts = [
        (1, close(serial["one"], k) and close(serial["all"], n * k),
         "times on a device that runs operations one after another",
         f"one = {k * 1e3:.0f} ms, all = {n * k * 1e3:.0f} ms",
         f"one = {ms(serial['one'])}, all = {ms(serial['all'])}",
         "time one operation, then all n submitted back to back (each on x, independent), "
         "with warm-up and synchronize"),
        (1, close(par["one"], k) and ran_together,
         "times on a device that runs independent operations together",
         f"one = {k * 1e3:.0f} ms, all about {k * 1e3:.0f} ms",
         f"one = {ms(par['one'])}, all = {ms(par['all'])}",
         "the n operations must not depend on each other: apply op to x each time, not to "
         "the previous result"),
        (1, par["parallel"] is True or par["parallel"] == np.True_,
         "verdict on the device that runs them together", "parallel = True",
         f"parallel = {par['parallel']!r}",
         "call it parallel when all n take clearly less than n times one"),
        (1, serial["parallel"] is False or serial["parallel"] == np.False_,
         "verdict on the device that runs them one by one", "parallel = False",
         f"parallel = {serial['parallel']!r}",
         "n operations one after another take about n times one: that is not parallel"),
    ]
    return result(name, 4, parts, "right times and verdicts on both kinds of device")


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
