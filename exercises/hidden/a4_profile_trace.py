"""Hidden checks of assignment 4 (the public ones: ``grader.checks.a4_profile_trace``)."""
from __future__ import annotations

import numpy as np

from grader.checks.a4_profile_trace import N, _trace, _traced
from grader.checks.result import CheckResult
from grader.checks.support import StudentError, call, failed, result
from grader.lab.timeline import Timeline

__all__ = ["check_record_trace", "check_chrome_overlap", "CASES"]


def check_record_trace(record_trace) -> CheckResult:
    """4 points: a Timeline with rows compute and copy (1), N intervals in each (1), none
    from before the run (1), the same overlap as the device recorded (1)."""
    name = "record_trace"
    try:
        tl, truth = _traced(record_trace)
    except StudentError as e:
        return failed(name, 4, e)
    if not isinstance(tl, Timeline):
        return CheckResult(name, 0, 4, "record_trace must return a grader.lab.Timeline",
                           seen=type(tl).__name__)
    rows = set(tl.rows)
    has_rows = {"compute", "copy"} <= rows
    count = lambda row: sum(i.row == row for i in tl.intervals)
    earliest = min((i.start for i in tl.intervals), default=0.0)
    only_run = bool(tl.intervals) and earliest >= truth.start() - 1e-12
    ov = tl.overlap("compute", "copy") if has_rows else -1.0
    n_ok = has_rows and count("compute") == N and count("copy") == N
    parts = [
        (1, has_rows, "rows of the timeline", "'compute' and 'copy'", str(sorted(rows)),
         "tl.add_records('compute', [r for r in records if r.kind == 'compute']) and the same for 'copy'"),
        (1, n_ok, "intervals per row", f"{N} compute and {N} copy",
         f"{count('compute')} compute and {count('copy')} copy",
         "one interval per kernel and per copy of the run; synchronize before reading "
         "device.records so that every task has finished"),
        (1, only_run, "intervals from the run only", f"none before t = {truth.start():.4f} s",
         f"first at {earliest:.4f} s", "note the clock (in ns: int(clock() * 1e9)) before "
         "run() and keep only records that start after it"),
        (1, has_rows and abs(ov - truth.overlap("compute", "copy")) < 1e-9,
         "compute/copy overlap in your timeline", f"{truth.overlap('compute', 'copy') * 1e3:.2f} ms",
         f"{ov * 1e3:.2f} ms" if ov >= 0 else "no rows", "build it from the device's own records"),
    ]
    return result(name, 4, parts, f"trace of the run: {N} kernels, {N} copies, "
                  f"{ov * 1e3:.2f} ms of overlap")


# (case, events, expected overlap in seconds of 'kernel' and 'gpu_memcpy')
CASES = [
    ("disjoint", [("kernel", 0, 100, 7), ("gpu_memcpy", 100, 50, 8)], 0.0),
    ("partly overlapping, in microseconds", [("kernel", 0, 100, 7), ("gpu_memcpy", 60, 100, 8)], 40e-6),
    ("nested events of one category (count once)",
     [("kernel", 0, 1000, 7), ("kernel", 100, 200, 7), ("gpu_memcpy", 0, 1000, 8)], 1000e-6),
    ("several intervals, other categories ignored",
     [("kernel", 0, 300, 7), ("kernel", 500, 300, 7), ("cpu_op", 0, 2000, 1),
      ("gpu_memcpy", 200, 400, 8), ("gpu_memcpy", 750, 100, 8)], 250e-6),
]


def check_chrome_overlap(overlap_from_chrome_trace) -> CheckResult:
    """4 points, one per synthetic trace in :data:`CASES`."""
    name = "overlap_from_chrome_trace"
    parts = []
    for case, events, want in CASES:
        try:
            got = call(overlap_from_chrome_trace, _trace(events), "kernel", "gpu_memcpy")
            ok = isinstance(got, (int, float, np.floating)) and abs(float(got) - want) < 1e-9
            seen = f"{float(got) * 1e6:.1f} us" if isinstance(got, (int, float, np.floating)) else repr(got)
        except StudentError as e:
            ok, seen = False, str(e)
        parts.append((1, ok, f"trace '{case}'", f"{want * 1e6:.1f} us", seen,
                      "use only complete events (ph == 'X'), ts and dur are microseconds; merge "
                      "each category's intervals before intersecting"))
    return result(name, 4, parts, "overlap read correctly from every trace")
