"""Assignment 4 (public checks): check with a trace that the code does what it claims.

Students write, in PyTorch or Paddle, ``trace_with_events(torch, op, xs)``: assignment 3's
overlapped program with a pair of timing events around every product and every copy,
returning ``{"compute": [(start, end), ...], "copy": [...]}`` in seconds; and
``overlap_from_chrome_trace(trace, cat_a, cat_b)``: the seconds during which events of two
categories of a Chrome trace (what ``torch.profiler`` and ``paddle.profiler`` export) ran at
the same time. These quick checks run them once and say whether they return the right kind
of value.
"""
from __future__ import annotations

import numpy as np

from ..sim import fixed_kernel, place
from .result import CheckResult
from .simulated import framework_problem, fresh, is_number, student_failed
from .support import StudentError, call

N = 3


def intervals_problem(out, n: int) -> str:
    """What is wrong with the shape of ``trace_with_events``' answer ('' when nothing)."""
    if not isinstance(out, dict) or not {"compute", "copy"} <= set(out):
        return "return a dict with keys 'compute' and 'copy'"
    for row in ("compute", "copy"):
        spans = out[row]
        if not isinstance(spans, (list, tuple)) or len(spans) != n:
            return f"'{row}' must hold {n} (start, end) pairs, one per {row} step"
        for s in spans:
            if not (isinstance(s, (list, tuple)) and len(s) == 2 and all(map(is_number, s))):
                return f"each entry of '{row}' must be a (start, end) pair of numbers"
    return ""


def public_trace_with_events(trace_with_events, framework: str = "torch") -> CheckResult:
    name = "trace_with_events runs"
    if (bad := framework_problem(name, 1, framework)) is not None:
        return bad
    fw, m = fresh(framework, warmup_s=0.0)
    xs = [place(fw, np.full((8, 8), i, np.float32)) for i in range(N)]
    try:
        out = call(trace_with_events, fw, fixed_kernel(0.002, name="op"), xs)
    except StudentError as e:
        return student_failed(name, 1, e, framework)
    if problem := intervals_problem(out, N):
        return CheckResult(name, 0, 1, problem, seen=type(out).__name__)
    # each product here takes 2 ms: its interval must be about that, in seconds
    length = out["compute"][0][1] - out["compute"][0][0]
    if not 0.001 <= length <= 0.004:
        return CheckResult(name, 0, 1, f"the first product's interval is {length:.6g}",
                           expected="about 0.002 (each product here takes 2 ms; seconds)",
                           seen=f"{length:.6g}", hint="elapsed_time gives milliseconds: divide "
                           "by 1000" if 1 <= length <= 4 else "time each product between a "
                           "pair of events recorded around it, on the products' stream",
                           advisory=True)
    return CheckResult(name, 1, 1, f"{N} compute and {N} copy intervals, the first product "
                       f"from {out['compute'][0][0]:.6f} to {out['compute'][0][1]:.6f}")


def chrome_trace(events: list[tuple]) -> dict:
    """Chrome trace JSON as torch.profiler exports it (times in microseconds) from
    ``(category, ts, dur, tid)`` tuples."""
    out = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for cat, ts, dur, tid in events:
        out.append({"ph": "X", "cat": cat, "name": f"{cat}_{ts}", "pid": 1, "tid": tid,
                    "ts": ts, "dur": dur, "args": {}})
    out.append({"ph": "i", "cat": "kernel", "name": "marker", "pid": 1, "tid": 7, "ts": 5,
                "s": "t"})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def public_chrome(overlap_from_chrome_trace, framework: str | None = None) -> CheckResult:
    name = "overlap_from_chrome_trace runs"
    trace = chrome_trace([("kernel", 0, 100, 7), ("gpu_memcpy", 100, 50, 8)])
    try:
        ov = call(overlap_from_chrome_trace, trace, "kernel", "gpu_memcpy")
    except StudentError as e:
        return failed_chrome(name, e)
    if not is_number(ov):
        return CheckResult(name, 0, 1, "return seconds as a float", seen=type(ov).__name__)
    if abs(float(ov)) > 1e-12:
        return CheckResult(name, 0, 1, "two events one after the other overlap",
                           expected="0.0 s (the kernel ends at 100 us, the copy starts there)",
                           seen=f"{float(ov)!r} s", hint="count only the time during which "
                           "both run", advisory=True)
    # the same two events, the copy starting halfway through the kernel: 50 us together
    try:
        half = call(overlap_from_chrome_trace, chrome_trace([("kernel", 0, 100, 7),
                                                             ("gpu_memcpy", 50, 100, 8)]),
                    "kernel", "gpu_memcpy")
    except StudentError as e:
        return failed_chrome(name, e)
    if not is_number(half) or abs(float(half) - 50e-6) > 1e-9:
        return CheckResult(name, 0, 1, "a kernel of 0-100 us and a copy of 50-150 us",
                           expected="5e-05 s together", seen=repr(half),
                           hint="the trace's times are microseconds: return seconds"
                           if is_number(half) and abs(float(half) - 50) < 1e-6 else
                           "the overlap is from the later start to the earlier end",
                           advisory=True)
    return CheckResult(name, 1, 1, f"{float(ov)!r} s for two events one after the other, "
                       "5e-05 s for two that overlap by 50 us")


def failed_chrome(name: str, e: StudentError, points: float = 1) -> CheckResult:
    return CheckResult(name, 0, points, str(e), hint="run the public check above in your "
                       "notebook to see the error")
