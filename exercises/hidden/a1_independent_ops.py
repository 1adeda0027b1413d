"""Hidden checks of assignment 1 (the public ones: ``grader.checks.a1_independent_ops``)."""
from __future__ import annotations

import numpy as np

from grader.checks.a1_independent_ops import (EARLIER_S, KERNEL_S, LONG_S, WARMUP_S,
                                              _experiment, _time_once)
from grader.checks.result import CheckResult  # noqa: F401 - the type every check returns
from grader.checks.support import StudentError, close, failed, result

__all__ = ["check_time_work", "check_experiment"]


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
