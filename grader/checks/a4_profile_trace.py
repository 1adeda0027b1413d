"""Assignment 4: check with a trace that the code does what it claims.

Students write ``record_trace(device, clock, run)``: run ``run()`` (which queues kernels
and copies on ``device``) and return a :class:`~grader.lab.Timeline` of that run only,
with rows ``"compute"`` and ``"copy"``; and ``overlap_from_chrome_trace(trace, cat_a,
cat_b)``: the seconds during which events of two categories of a Chrome trace (what
``torch.profiler`` and ``paddle.profiler`` export) ran at the same time.

This module holds what a student's notebook may import (the public checks and what
they share with the hidden ones); the graded checks are the course's, in
``exercises/hidden/a4_profile_trace.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

import numpy as np

from ..lab.sim import Kernel, virtual_devices
from ..lab.timeline import Timeline
from .result import CheckResult
from .support import StudentError, call, failed

N, KERNEL_S, COPY_S = 5, 0.010, 0.006


def _affine(x):
    return 2 * x + 1


def overlapped_run(device, xs):
    """What the traced code does: a kernel per input, each result copied to the host
    without waiting (assignment 3's ``overlapped``)."""
    k = Kernel("affine", _affine, KERNEL_S)
    return [device.copy_to_host(device.submit(k, x), non_blocking=True) for x in xs]


def _traced(record_trace):
    shape = (16, 16)
    plan = virtual_devices(1, warmup_seconds=0, bandwidth=int(np.prod(shape)) * 4 / COPY_S,
                           copy_latency=0)
    dev, clock = plan[0], plan.clock
    xs = [dev.put(np.full(shape, i, np.float32)) for i in range(N)]
    # Earlier work, finished before the traced run: it is in device.records but is not
    # part of the run, and a trace of the run must leave it out.
    dev.submit(Kernel("earlier", _affine, 0.05), xs[0])
    dev.synchronize()
    t0 = clock.now_ns
    tl = call(record_trace, dev, clock, lambda: overlapped_run(dev, xs))
    dev.synchronize()
    truth = Timeline("truth")
    recs = [r for r in dev.records if r.start_ns >= t0]
    truth.add_records("compute", [r for r in recs if r.kind == "compute"])
    truth.add_records("copy", [r for r in recs if r.kind == "copy"])
    return tl, truth


def _trace(events: list[tuple]) -> dict:
    """Chrome trace JSON as torch.profiler exports it (times in microseconds)."""
    out = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for cat, ts, dur, tid in events:
        out.append({"ph": "X", "cat": cat, "name": f"{cat}_{ts}", "pid": 1, "tid": tid,
                    "ts": ts, "dur": dur, "args": {}})
    out.append({"ph": "i", "cat": "kernel", "name": "marker", "pid": 1, "tid": 7, "ts": 5, "s": "t"})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


_DISJOINT = [("kernel", 0, 100, 7), ("gpu_memcpy", 100, 50, 8)]   # no overlap


def public_record_trace(record_trace) -> CheckResult:
    try:
        tl, _ = _traced(record_trace)
    except StudentError as e:
        return failed("record_trace runs", 1, e, "fix the error above")
    if not isinstance(tl, Timeline):
        return CheckResult("record_trace runs", 0, 1, "record_trace must return a Timeline",
                           seen=type(tl).__name__)
    return CheckResult("record_trace runs", 1, 1, f"a Timeline with rows {tl.rows}")


def public_chrome(overlap_from_chrome_trace) -> CheckResult:
    try:
        ov = call(overlap_from_chrome_trace, _trace(_DISJOINT), "kernel", "gpu_memcpy")
    except StudentError as e:
        return failed("overlap_from_chrome_trace runs", 1, e, "fix the error above")
    if not isinstance(ov, (int, float, np.floating)):
        return CheckResult("overlap_from_chrome_trace runs", 0, 1, "return seconds as a float",
                           seen=repr(ov))
    return CheckResult("overlap_from_chrome_trace runs", 1, 1, f"{ov!r} s for two disjoint events")
