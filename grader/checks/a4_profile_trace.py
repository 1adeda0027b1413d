"""Assignment 4: check with a trace that the code does what it claims.

Students write ``record_trace(device, clock, run)``: run ``run()`` (which queues kernels
and copies on ``device``) and return a :class:`~grader.lab.Timeline` of that run only,
with rows ``"compute"`` and ``"copy"``; and ``overlap_from_chrome_trace(trace, cat_a,
cat_b)``: the seconds during which events of two categories of a Chrome trace (what
``torch.profiler`` and ``paddle.profiler`` export) ran at the same time.
"""
from __future__ import annotations

import numpy as np

from ..lab.sim import Kernel, virtual_devices
from ..lab.timeline import Timeline
from .result import CheckResult
from .support import StudentError, call, failed, result

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


def _trace(events: list[tuple]) -> dict:
    """Chrome trace JSON as torch.profiler exports it (times in microseconds)."""
    out = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for cat, ts, dur, tid in events:
        out.append({"ph": "X", "cat": cat, "name": f"{cat}_{ts}", "pid": 1, "tid": tid,
                    "ts": ts, "dur": dur, "args": {}})
    out.append({"ph": "i", "cat": "kernel", "name": "marker", "pid": 1, "tid": 7, "ts": 5, "s": "t"})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


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
        ov = call(overlap_from_chrome_trace, _trace(CASES[0][1]), "kernel", "gpu_memcpy")
    except StudentError as e:
        return failed("overlap_from_chrome_trace runs", 1, e, "fix the error above")
    if not isinstance(ov, (int, float, np.floating)):
        return CheckResult("overlap_from_chrome_trace runs", 0, 1, "return seconds as a float",
                           seen=repr(ov))
    return CheckResult("overlap_from_chrome_trace runs", 1, 1, f"{ov!r} s for two disjoint events")
