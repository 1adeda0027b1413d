"""Assignment 4's grading checks (instructor only: not importable from a student's kernel).

``trace_with_events`` runs on a simulated GPU whose kernels and copies take known times;
the intervals the answer measured with events are compared with what the GPU did (the
machine's own record), so it is seen whether the events were recorded on the right streams
and read in the right unit. ``overlap_from_chrome_trace`` reads Chrome traces built here
with known answers.
"""
from __future__ import annotations

import numpy as np

from grader.checks.a4_profile_trace import chrome_trace, intervals_problem
from grader.checks.result import CheckResult
from grader.checks.simulated import NAMES, framework_problem, fresh, is_number, student_failed
from grader.checks.support import StudentError, call, result
from grader.sim import fixed_kernel, place

N, KERNEL_S, COPY_S = 5, 0.009, 0.006
TOL_S = 0.0002          # events are a launch apart from what they mark


def _affine(v):
    return 2 * v + 1


def _traced(trace_with_events, framework: str):
    shape = (16, 16)
    fw, m = fresh(framework, warmup_s=0.03, copy_bw=int(np.prod(shape)) * 4 / COPY_S,
                  copy_latency_s=0.0, launch_s=4e-6)
    xs = [place(fw, np.full(shape, i, np.float32)) for i in range(N)]
    op = fixed_kernel(KERNEL_S, fn=_affine, name="op")
    op(xs[0])                   # warmed up, and earlier work that is not part of the trace
    m.synchronize_all()
    t0 = m.clock.now_ns
    out = call(trace_with_events, fw, op, xs)
    return out, m, t0


def _matches(seen: list, truth: list[tuple[float, float]], shift: float, scale: float) -> bool:
    return all(abs(s * scale - shift - a) <= TOL_S and abs(e * scale - shift - b) <= TOL_S
               for (s, e), (a, b) in zip(seen, truth))


def _overlap(a: list, b: list) -> float:
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def check_trace_with_events(trace_with_events, framework: str = "torch") -> CheckResult:
    """4 points: the products' intervals are the GPU's (1), the copies' intervals are the
    GPU's (1), in seconds (1), and the traced program overlapped copies with computation
    as assignment 3 asks (1: only copies that waited for their product count)."""
    name = "trace_with_events"
    if (bad := framework_problem(name, 4, framework)) is not None:
        return bad
    try:
        out, m, t0 = _traced(trace_with_events, framework)
    except StudentError as e:
        return student_failed(name, 4, e, framework)
    if problem := intervals_problem(out, N):
        return CheckResult(name, 0, 4, problem, seen=type(out).__name__ if not isinstance(out, dict)
                           else f"keys {sorted(map(str, out))[:4]}")
    n = NAMES[framework]
    products = sorted((o.start_ns / 1e9, o.end_ns / 1e9) for o in m.compute_ops(t0))
    copies = sorted((o.start_ns / 1e9, o.end_ns / 1e9) for o in m.copy_ops(t0) if o.name == "d2h")
    if len(products) != N or len(copies) != N:
        return CheckResult(name, 0, 4, "the traced program is not assignment 3's overlapped one",
                           expected=f"{N} products and {N} copies to the host",
                           seen=f"{len(products)} products and {len(copies)} copies",
                           hint="run op on every x and copy each result to the host once")
    comp = [tuple(map(float, p)) for p in out["compute"]]
    copy = [tuple(map(float, p)) for p in out["copy"]]
    # times since the answer's own origin: align its first product with the GPU's
    scale = 1.0 if abs(comp[0][1] - comp[0][0] - (products[0][1] - products[0][0])) < 0.5 * KERNEL_S \
        else 1e-3
    shift = comp[0][0] * scale - products[0][0]
    comp_ok = _matches(comp, products, shift, scale)
    copy_ok = _matches(copy, copies, shift, scale)
    if all(e - s < TOL_S for s, e in copy):
        copy_hint = ("the copy events were recorded on the products' stream, not on the copy "
                     f"stream: record them where the copy is queued ({n['use_stream']}, or "
                     "event.record(copy_stream))")
    else:
        copy_hint = ("record one event just before and one just after each copy, on the copy "
                     "stream")
    shown = lambda spans: ", ".join(f"({s:.4f}, {e:.4f})" for s, e in spans[:2]) + ", ..."  # noqa: E731
    # a copy that did not wait for its product overlaps computation by copying garbage
    # (assignment 3's mistake): only copies that waited count
    races = {v.at_ns for v in m.violations if v.kind == "race"}
    waited = sorted((o.start_ns / 1e9, o.end_ns / 1e9) for o in m.copy_ops(t0)
                    if o.name == "d2h" and o.launched_ns not in races)
    ov = _overlap(products, waited)
    ov_hint = (f"{len(copies) - len(waited)} of {len(copies)} copies did not wait for their "
               "product (they read it before it was computed), so their overlap does not "
               "count: the copy stream waits for the product's event before the copy"
               if len(waited) < len(copies) else
               "trace assignment 3's overlapped program: each copy on a second stream, into "
               "pinned memory, after its product's event")
    parts = [
        (1, comp_ok, "the products' intervals", shown([(a - products[0][0], b - products[0][0])
                                                      for a, b in products]),
         shown(comp), "record one event just before and one just after each product, on the "
         "products' stream, and subtract an origin event recorded before the first"),
        (1, copy_ok, "the copies' intervals", shown([(a - products[0][0], b - products[0][0])
                                                    for a, b in copies]),
         shown(copy), copy_hint),
        (1, scale == 1.0, "unit of the times", "seconds", "milliseconds" if scale != 1.0 else
         "seconds", "elapsed_time gives milliseconds: divide by 1000"),
        (1, ov >= 0.9 * (N - 1) * COPY_S, "copies overlapping computation in the traced run",
         f"about {(N - 1) * COPY_S * 1e3:.1f} ms", f"{ov * 1e3:.1f} ms", ov_hint),
    ]
    return result(name, 4, parts, f"{N} products and {N} copies traced; they overlapped "
                  f"{ov * 1e3:.1f} ms")


# (case, events, expected overlap in seconds of 'kernel' and 'gpu_memcpy')
CASES = [
    ("disjoint", [("kernel", 0, 100, 7), ("gpu_memcpy", 100, 50, 8)], 0.0),
    ("partly overlapping, in microseconds", [("kernel", 0, 100, 7), ("gpu_memcpy", 60, 100, 8)],
     40e-6),
    ("nested events of one category (count once)",
     [("kernel", 0, 1000, 7), ("kernel", 100, 200, 7), ("gpu_memcpy", 0, 1000, 8)], 1000e-6),
    ("several intervals, other categories ignored",
     [("kernel", 0, 300, 7), ("kernel", 500, 300, 7), ("cpu_op", 0, 2000, 1),
      ("gpu_memcpy", 200, 400, 8), ("gpu_memcpy", 750, 100, 8)], 250e-6),
]


def check_chrome_overlap(overlap_from_chrome_trace, framework: str | None = None) -> CheckResult:
    """4 points, one per synthetic trace in :data:`CASES` (plain Python: any framework)."""
    name = "overlap_from_chrome_trace"
    parts = []
    for case, events, want in CASES:
        got = None
        try:
            got = call(overlap_from_chrome_trace, chrome_trace(events), "kernel", "gpu_memcpy")
            ok = is_number(got) and abs(float(got) - want) < 1e-9
            seen = f"{float(got) * 1e6:.1f} us" if is_number(got) else f"a {type(got).__name__}"
        except StudentError as e:
            ok, seen = False, str(e)
        if want and is_number(got) and abs(float(got) - want * 1e6) < 1e-6:
            hint = "ts and dur are microseconds: return seconds (multiply by 1e-6)"
        elif case.startswith("nested") or case.startswith("several"):
            hint = ("merge each category's intervals before intersecting (nested events of one "
                    "category count once)")
        else:
            hint = "use only complete events (ph == 'X'); ts and dur are microseconds"
        parts.append((1, ok, f"trace '{case}'", f"{want * 1e6:.1f} us", seen, hint))
    return result(name, 4, parts, "overlap read correctly from every trace")
