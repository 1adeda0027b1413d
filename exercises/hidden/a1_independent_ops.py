"""Assignment 1's grading checks (instructor only: not importable from a student's kernel).

The answers run on simulated GPUs (:mod:`grader.sim`) whose operations take times fixed
here, so a missing synchronize, a missing warm-up or a clock of the student's own shows as a
wrong number on every machine, every time. The durations are nowhere on the objects the
answers get: they measure them, as on a GPU.
"""
from __future__ import annotations

import numpy as np

from grader.checks.result import CheckResult
from grader.checks.simulated import (NAMES, framework_problem, fresh, is_number, ms,
                                     student_failed)
from grader.checks.support import StudentError, call, close, result
from grader.sim import fixed_kernel, place

KERNEL_S = 0.012     # the operation time_work is asked to time
WARMUP_S = 0.045     # a kernel's first launch pays this on top
EARLIER_S = 0.150    # work queued before time_work is called
LONG_S = 1.7         # no wall clock times a call at this virtual length
LAUNCH_S = 6e-6
X_N = 16             # the experiment's x is X_N x X_N


def _x(n: int = 4) -> np.ndarray:
    return (np.arange(n * n, dtype=np.float32).reshape(n, n) % 7) / 8


def _time_once(time_work, framework: str, *, warmup_s: float, earlier_s: float, warmup: int,
               repeats: int, seconds: float = KERNEL_S):
    fw, m = fresh(framework, warmup_s=warmup_s, launch_s=LAUNCH_S)
    x = place(fw, _x())
    if earlier_s:
        fixed_kernel(earlier_s, name="earlier_work")(x)      # queued, not waited for
    t = call(time_work, fw, m.clock.read, fixed_kernel(seconds, name="op"), x,
             warmup=warmup, repeats=repeats)
    return t, m


def _timing_hint(t, m, k: float, framework: str, repeats: int) -> str:
    n = NAMES[framework]
    if m.clock.reads == 0 and m.elapsed_calls == 0:
        return ("time with the clock you were given (clock()) or with device events "
                f"({n['event']}, elapsed_time): a clock of your own does not follow the GPU")
    if is_number(t) and close(t, 1000 * k, 0.2):
        return "elapsed_time gives milliseconds: return seconds (divide by 1000)"
    if is_number(t) and t < k / 2:
        return (f"the clock was read before the GPU had finished: fn(*args) only queues the "
                f"work; call {n['sync']} (or end.synchronize() with events) before reading it")
    if is_number(t) and close(t, repeats * k, 0.1):
        return "return the median of the repeats (the time of one run), not their sum"
    return "time each of the repeats runs separately and return their median, in seconds"


def check_time_work(time_work, framework: str = "torch") -> CheckResult:
    """4 points: synchronized (2), warmed up (1), earlier work left out (1)."""
    name, k = "time_work measures GPU time", KERNEL_S
    if (bad := framework_problem(name, 4, framework)) is not None:
        return bad
    n = NAMES[framework]
    # each run on its own: one that raises costs the parts that read it (issue 37)
    runs, errors = {}, {}
    for key, kw in (("plain", dict(warmup_s=0, earlier_s=0, repeats=3)),
                    ("cold", dict(warmup_s=WARMUP_S, earlier_s=0, repeats=1)),
                    ("busy", dict(warmup_s=0, earlier_s=EARLIER_S, repeats=1)),
                    # the same answer for a much longer operation: an answer reading a wall
                    # clock cannot follow it, however long a call happens to take
                    ("long", dict(warmup_s=0, earlier_s=0, repeats=3, seconds=LONG_S))):
        try:
            runs[key] = _time_once(time_work, framework, warmup=1, **kw)
        except StudentError as e:
            errors[key] = student_failed(name, 4, e, framework)
    if not runs:
        return errors["plain"]
    (plain, m), (cold, _), (busy, _), (long, _) = (runs.get(key, (None, None)) for key in
                                                   ("plain", "cold", "busy", "long"))
    synced = not {"plain", "long"} & set(errors) and close(plain, k) and close(long, LONG_S)
    if is_number(cold) and close(cold, k + WARMUP_S, 0.1):
        cold_hint = ("the first run was timed cold (a kernel's first launch pays a one-time "
                     "cost): run fn warmup times, untimed, before timing")
    else:
        cold_hint = (f"the warm-up was still running when the clock started: {n['sync']} "
                     "after the warm-up, before the first clock() read")
    raised = next((errors[key] for key in ("plain", "long") if key in errors), None)
    parts = [
        (2, synced, "the time is not the operation's GPU time", f"{k * 1e3:.0f} ms per run",
         ms(plain), _timing_hint(plain, m, k, framework, 3)) if raised is None else
        (2, False, f"the operation's GPU time: {raised.message}", f"{k * 1e3:.0f} ms per run",
         "an exception", raised.hint),
        (1, synced and close(cold, k), "a cold GPU was timed",
         f"{k * 1e3:.0f} ms (the first launch costs {WARMUP_S * 1e3:.0f} ms more)", ms(cold),
         cold_hint) if "cold" not in errors else
        (1, False, f"a cold GPU: {errors['cold'].message}",
         f"{k * 1e3:.0f} ms (the first launch costs {WARMUP_S * 1e3:.0f} ms more)",
         "an exception", errors["cold"].hint),
        (1, synced and close(busy, k), "the clock started while earlier work was still queued",
         f"{k * 1e3:.0f} ms (work queued before the call takes {EARLIER_S * 1e3:.0f} ms)",
         ms(busy), f"{n['sync']} before the first clock() read, not only after the work "
         "(events recorded on the stream leave earlier work out by themselves)")
        if "busy" not in errors else
        (1, False, f"with earlier work queued: {errors['busy'].message}",
         f"{k * 1e3:.0f} ms (work queued before the call takes {EARLIER_S * 1e3:.0f} ms)",
         "an exception", errors["busy"].hint),
    ]
    return result(name, 4, parts, f"synchronized, warmed up, {k * 1e3:.0f} ms measured as "
                  f"{ms(plain)}")


def _experiment(fn, framework: str, parallel: bool, n: int):
    k = KERNEL_S
    # x @ x fills 1/n of the device and takes k: n of them fit side by side
    fw, m = fresh(framework, parallel=parallel, warmup_s=WARMUP_S, launch_s=LAUNCH_S,
                  capacity=X_N * X_N * n, flops=2 * X_N ** 3 * n / k)
    x = place(fw, _x(X_N))
    out = call(fn, fw, m.clock.read, x, n=n)
    if not isinstance(out, dict) or not {"one", "all", "parallel"} <= set(out):
        raise StudentError(f"expected a dict with keys 'one', 'all', 'parallel', got "
                           f"{type(out).__name__}")
    return out, m


def _one_by_one(m) -> tuple[int, int]:
    """On a machine that runs independent work side by side: how many products were queued
    behind another product without the host waiting between their launches (a chain of
    dependent products), and how many were launched only after the host had waited for the
    one before (synchronized one at a time)."""
    products = sorted((o for o in m.ops if o.kind == "compute" and o.name == "matmul"),
                      key=lambda o: o.launched_ns)
    chain = waited = 0
    for prev, o in zip(products, products[1:]):
        host_waited = any(prev.launched_ns <= t0 and t1 <= o.launched_ns and t1 >= prev.end_ns
                          for _, t0, t1 in m.host_waits)
        if host_waited:
            waited += 1
        elif o.start_ns >= prev.end_ns > o.launched_ns:
            chain += 1
    return chain, waited


_GUESSED = ("the verdict contradicts your own times on one of the two frameworks (all n about "
            "n times one, yet parallel = True; or clearly less, yet False): decide it from the "
            "two times, not once for all")


def _contradicts(out: dict, n: int) -> bool:
    """Whether the answer's verdict contradicts its own times: True while all n took at least
    0.9 n times one, or False while they took at most half of it (times that are not
    numbers contradict nothing)."""
    one, every, verdict = out.get("one"), out.get("all"), out.get("parallel")
    if not (is_number(one) and is_number(every)) or one <= 0:
        return False
    ratio = every / (n * one)
    return (verdict is True or verdict is np.True_) and ratio >= 0.9 or \
        (verdict is False or verdict is np.False_) and ratio <= 0.5


def check_experiment(independent_ops_experiment, framework: str = "torch",
                     n: int = 8) -> CheckResult:
    """4 points: on a GPU that runs operations one after another (eager execution) and on one
    that runs independent operations side by side (a graph scheduler), the times (1 + 1)
    and the verdicts (1 + 1) are right."""
    name, k = f"experiment with {n} independent operations", KERNEL_S
    if (bad := framework_problem(name, 4, framework)) is not None:
        return bad
    runs, errors = {}, {}           # each framework on its own (issue 37)
    for key, parallel in (("serial", False), ("par", True)):
        try:
            runs[key] = _experiment(independent_ops_experiment, framework, parallel, n)
        except StudentError as e:
            errors[key] = student_failed(name, 4, e, framework)
    if not runs:
        return errors["serial"]
    (serial, m_serial), (par, m_par) = (runs.get(key, (None, None)) for key in ("serial", "par"))
    sync = NAMES[framework]["sync"]
    # a verdict is paid only when the answer decided it from its own times, on both kinds of
    # framework: a constant True (or False) is right on one of them by luck, and its own
    # times on the other contradict it
    guessed = [key for key, out in (("serial", serial), ("par", par))
               if out is not None and _contradicts(out, n)]

    def times_hint(out, want_all: float, m) -> str:
        one, every = out["one"], out["all"]
        if is_number(one) and close(one, 1000 * k, 0.2):
            return "elapsed_time gives milliseconds: return seconds"
        if is_number(every) and every < min(want_all, k) / 2:
            return f"'all' was read before the products were done: {sync} before the clock"
        if is_number(every) and close(every, n * k, 0.25) and want_all < n * k / 2:
            # why they ran one by one, from what the machine recorded: products queued
            # back to back that each waited for the one before (a dependency), or products
            # the host waited for one at a time
            chain, waited = _one_by_one(m)
            if chain >= n - 1:
                return ("the n products depend on each other (each uses the previous result), "
                        "so even a framework that runs independent work together runs them "
                        "one by one: compute x @ x each time")
            if waited >= n - 1:
                return (f"the host waited for each product before queuing the next ({sync}, "
                        ".item() or a blocking copy inside the loop), so they never had the "
                        "chance to run together: queue all n, then synchronize once")
        return ("time one product with time_work, and all n from the first launch until "
                "the last is done")

    parts = []
    if serial is not None:
        parts.append((1, close(serial["one"], k) and close(serial["all"], n * k),
                      "times on a GPU that runs operations one after another",
                      f"one = {k * 1e3:.0f} ms, all = {n * k * 1e3:.0f} ms",
                      f"one = {ms(serial['one'], 2)}, all = {ms(serial['all'], 2)}",
                      times_hint(serial, n * k, m_serial)))
    if par is not None:
        parts += [
            (1, close(par["one"], k) and close(par["all"], k, 0.25),
             "times on a framework that runs independent operations side by side",
             f"one = {k * 1e3:.0f} ms, all about {k * 1e3:.0f} ms",
             f"one = {ms(par['one'], 2)}, all = {ms(par['all'], 2)}", times_hint(par, k, m_par)),
            (1, (par["parallel"] is True or par["parallel"] is np.True_) and not guessed,
             "verdict where they ran side by side", "parallel = True, decided from the times",
             f"parallel = {par['parallel']!r}" if isinstance(par["parallel"], (bool, np.bool_))
             else "not a bool", _GUESSED if guessed else
             "call it parallel when all n take clearly less than n times one"),
        ]
    else:
        r = errors["par"]
        parts.append((2, False, "on a framework that runs independent operations side by "
                      f"side: {r.message}", "times and parallel = True", "an exception", r.hint))
    if serial is not None:
        parts.append((1, (serial["parallel"] is False or serial["parallel"] is np.False_)
                      and not guessed,
                      "verdict where they ran one by one", "parallel = False, decided from the times",
                      f"parallel = {serial['parallel']!r}"
                      if isinstance(serial["parallel"], (bool, np.bool_)) else "not a bool",
                      _GUESSED if guessed else
                      "n operations one after another take about n times one: that is not "
                      "parallel"))
    else:
        r = errors["serial"]
        parts.insert(0, (2, False, f"on a GPU that runs operations one after another: "
                         f"{r.message}", "times and parallel = False", "an exception", r.hint))
    return result(name, 4, parts, "right times and verdicts on both kinds of framework")
