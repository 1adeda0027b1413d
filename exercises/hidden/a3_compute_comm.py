"""Assignment 3's grading checks (instructor only: not importable from a student's kernel).

Kernels and copies take known times on the simulated GPU; the machine records on which
stream each ran, into which kind of host memory each copy went and whether the host waited
for it, and every race or early read. So the checks see whether results were read before
their copies landed, whether a copy read its product before it was computed, whether the
clock was read before the work was done, whether copies overlapped computation (and if
not, why not), and how many copies there were.
"""
from __future__ import annotations

import numpy as np

from grader.checks.result import CheckResult
from grader.checks.simulated import NAMES, framework_problem, fresh, is_number, student_failed
from grader.checks.support import StudentError, call, close, result
from grader.sim import fixed_kernel, host_value, place

KERNEL_S, COPY_S, N = 0.011, 0.007, 6
SHAPE = (32, 32)


def _affine(v):
    return 2 * v + 1


def _device(framework: str):
    nbytes = int(np.prod(SHAPE)) * 4
    fw, m = fresh(framework, warmup_s=0.05, copy_bw=nbytes / COPY_S, copy_latency_s=0.0,
                  launch_s=5e-6)
    xs_host = [np.full(SHAPE, i, np.float32) for i in range(N)]
    xs = [place(fw, x) for x in xs_host]
    op = fixed_kernel(KERNEL_S, fn=_affine, name="op")
    op(xs[0])                       # warmed up: warm-up is assignment 1's topic
    m.synchronize_all()
    return fw, m, op, xs, xs_host


def _run(fn, framework: str):
    fw, m, op, xs, xs_host = _device(framework)
    t0 = m.clock.now_ns
    out = call(fn, fw, m.clock.read, op, xs)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise StudentError(f"{getattr(fn, '__name__', 'it')} must return (results, seconds), "
                           f"got {type(out).__name__}")
    results, secs = out
    # the results as the caller would read them when the function returns
    values = [host_value(r) for r in results] if isinstance(results, list) else None
    m.synchronize_all()
    truth = (max([o.end_ns for o in m.ops if o.launched_ns >= t0] + [t0]) - t0) / 1e9
    return values, secs, xs_host, m, t0, truth


def _results(values, xs_host, m) -> tuple[bool, str, str]:
    """(ok, what was seen, the hint for what is wrong)."""
    if values is None:
        return False, "not a list", "return a list with one host result per input"
    if len(values) != len(xs_host):
        return False, f"{len(values)} results for {len(xs_host)} inputs", \
            "return one result per input, in order"
    if any(v is None for v in values):
        return False, f"{sum(v is None for v in values)} result(s) not on the host", \
            "copy each result to the host (a GPU tensor is not a host result)"
    try:
        arrs = [np.asarray(v, dtype=np.float64) for v in values]
    except (TypeError, ValueError):
        return False, "results that are not arrays", "return host tensors or NumPy arrays"
    bad_nan = sum(np.isnan(a).any() for a in arrs)
    if bad_nan:
        seen = f"{bad_nan} of {len(arrs)} results hold garbage (NaN)"
        if any(v.kind == "race" for v in m.violations):
            return False, seen, ("a copy read its product before the product was computed: the "
                                 "copy stream must wait for the product (record an event after "
                                 "it, then copy_stream.wait_event(event))")
        return False, seen, ("the results were read before their copies landed: a non-blocking "
                             "copy has landed only after you synchronize (or wait for an "
                             "event after it)")
    bad = [i for i, (a, x) in enumerate(zip(arrs, xs_host))
           if a.shape != x.shape or not np.allclose(a, _affine(x.astype(np.float64)))]
    if bad:
        return False, f"results {bad} differ from op(x)", "return op(x) for every x, in order"
    return True, "op(x) for every x", ""


def _raced(m, t0: int) -> list:
    """The copies to the host that read their product before it was computed (the machine
    records such a race at the moment the copy is queued, before its clock moves on)."""
    races = {v.at_ns for v in m.violations if v.kind == "race"}
    return [o for o in m.copy_ops(t0) if o.name == "d2h" and o.launched_ns in races]


def _overlap(m, t0: int) -> float:
    """Seconds of copying to the host that ran beside computation, counting only copies that
    waited for their product: a copy that does not wait overlaps computation because it
    copies garbage, the mistake the task teaches against, and earns nothing."""
    raced = set(_raced(m, t0))

    def merged(ops):
        out: list[list[int]] = []
        for s, e in sorted((o.start_ns, o.end_ns) for o in ops):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return out

    comp = merged(o for o in m.compute_ops(t0))
    copies = merged(o for o in m.copy_ops(t0) if o.name == "d2h" and o not in raced)
    return sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in comp for s2, e2 in copies) / 1e9


def _overlap_hint(m, t0: int, framework: str) -> str:
    n = NAMES[framework]
    copies = [o for o in m.copy_ops(t0) if o.name == "d2h"]
    if raced := _raced(m, t0):
        return (f"{len(raced)} of {len(copies)} copies did not wait for their product (they "
                "read it before it was computed), so their overlap does not count: record an "
                "event after each product and make the copy stream wait for it "
                "(copy_stream.wait_event(event)) before the copy")
    compute_streams = {o.stream for o in m.compute_ops(t0)}
    if copies and not any(o.pinned for o in copies):
        return ("the copies went to pageable host memory, so the host waited for each one "
                "before it could queue the next product: copy into pinned memory "
                f"({n['to_pinned']}, or {n['pinned_buffer']})")
    if copies and all(o.host_waited for o in copies):
        return ("the host waited for every copy (a blocking copy): queue them without waiting "
                f"({n['to_pinned']})")
    if copies and {o.stream for o in copies} <= compute_streams:
        return ("the copies were queued on the products' stream: each waits for the products "
                "before it and the next product waits for it. Queue them on a second stream "
                f"({n['use_stream']}), after waiting for the product's event")
    return ("queue every product and start each copy as soon as its product is done, on a "
            "second stream, without making the host wait")


def _ms(t) -> str:
    return f"{float(t) * 1e3:.2f} ms" if is_number(t) else f"a {type(t).__name__}"


def _time_part(secs, truth, framework: str, points: float = 1):
    return (points, close(secs, truth), "time of the run", f"{_ms(truth)} (until the last copy landed)",
            _ms(secs), f"the clock was read before the copies had landed: {NAMES[framework]['sync']} "
            "before reading it the second time" if is_number(secs) and secs < truth else
            "time from the start until every result is on the host")


def check_sequential(sequential, framework: str = "torch") -> CheckResult:
    """3 points: right results (1), the time is the whole run (1), N copies (1)."""
    name = "sequential"
    if (bad := framework_problem(name, 3, framework)) is not None:
        return bad
    try:
        values, secs, xs_host, m, t0, truth = _run(sequential, framework)
    except StudentError as e:
        return student_failed(name, 3, e, framework)
    ok, seen, hint = _results(values, xs_host, m)
    copies = sum(o.name == "d2h" for o in m.copy_ops(t0))
    parts = [
        (1, ok, "results", "op(x) for every x, in order", seen, hint),
        _time_part(secs, truth, framework),
        (1, copies == N, "number of copies to the host", str(N), str(copies),
         "copy each result once (printing a GPU tensor, .item() or .numpy() copy it too)"),
    ]
    return result(name, 3, parts, f"{N} results in {_ms(secs)}")


def check_overlapped(overlapped, framework: str = "torch") -> CheckResult:
    """5 points: copies overlap computation (3: the task's subject, so the sequential
    function handed in here gets 2; only copies that waited for their product count),
    right results (1: garbage means read before the copy
    landed, or copied before the product was computed), the time is the whole run (0.5),
    N copies (0.5)."""
    name = "overlapped"
    if (bad := framework_problem(name, 5, framework)) is not None:
        return bad
    try:
        values, secs, xs_host, m, t0, truth = _run(overlapped, framework)
    except StudentError as e:
        return student_failed(name, 5, e, framework)
    ok, seen, hint = _results(values, xs_host, m)
    copies = sum(o.name == "d2h" for o in m.copy_ops(t0))
    ov = _overlap(m, t0)
    want_ov = (N - 1) * COPY_S   # every copy but the last runs beside a product
    parts = [
        (1, ok, "results", "op(x) for every x, in order", seen, hint),
        _time_part(secs, truth, framework, 0.5),
        (3, ov >= 0.9 * want_ov, "copies overlapping computation",
         f"about {_ms(want_ov)} of overlap", _ms(ov), _overlap_hint(m, t0, framework)),
        (0.5, copies == N, "number of copies to the host", str(N), str(copies),
         "copy each result once (printing a GPU tensor, .item() or .numpy() copy it too)"),
    ]
    return result(name, 5, parts, f"{N} results in {_ms(secs)}, {_ms(ov)} of copying hidden "
                  "behind computation")
