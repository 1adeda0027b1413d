"""Assignment 2's grading checks (instructor only: not importable from a student's kernel).

On the simulated GPU a kernel fills a share of the device that grows with its output: a
small product fills a quarter, so four of them on four streams run side by side; a large one
fills it all, so streams gain nothing. What each answer did (which streams its products ran
on, whether a stream read ``x`` before it was ready, when the work ended) is read from the
machine, so the first hint names the mistake that was made.
"""
from __future__ import annotations

import numpy as np

from grader.checks.result import CheckResult
from grader.checks.simulated import NAMES, framework_problem, fresh, is_number, student_failed
from grader.checks.support import StudentError, call, close, result
from grader.sim import fixed_kernel, place

SMALL, LARGE = 32, 64          # sizes of x
SMALL_S = 0.005                # a small product; a large one takes 2 * SMALL_S
WARMUP_S = 0.040
PREPARE_S = 0.030              # x is still being computed when the answer is called


def _device(framework: str, warmup_s: float = WARMUP_S):
    # width of a SMALL x SMALL product: SMALL^2 / capacity = 1/4
    return fresh(framework, warmup_s=warmup_s, launch_s=5e-6, capacity=LARGE * LARGE,
                 flops=8 * SMALL ** 3 / SMALL_S)


def _ms(t) -> str:
    return f"{float(t) * 1e3:.3f} ms" if is_number(t) else f"a {type(t).__name__}"


def _run(time_on_streams, framework: str, n_ops: int, n_streams: int):
    fw, m = _device(framework)
    x0 = place(fw, np.eye(SMALL, dtype=np.float32))
    # queued, not done, and leaving room beside it: a stream that does not wait for it runs
    # at once and reads x before it is written
    x = fixed_kernel(PREPARE_S, width=0.25, fn=lambda v: v, name="prepare")(x0)
    t0 = m.clock.now_ns
    t = call(time_on_streams, fw, m.clock.read, x, n_ops, n_streams)
    products = [o for o in m.compute_ops(t0) if o.name == "matmul"][-n_ops:]
    return t, m, products


def _streams_hint(t, m, products, n_streams: int, expected: float, framework: str) -> str:
    n = NAMES[framework]
    races = [v for v in m.violations if v.kind == "race"]
    used = len({o.stream for o in products})
    span = (max(o.end_ns for o in products) - min(o.start_ns for o in products)) / 1e9 \
        if products else 0.0
    if races:
        return ("the new streams started before x was ready (it was still being computed on "
                "the current stream): make each new stream wait for it, "
                f"s.wait_stream({n['current']}), or synchronize before launching")
    if used != n_streams:
        return (f"the products ran on {used} stream(s), not {n_streams}: launch product i "
                f"inside `{n['use_stream'].replace('s)', 'streams[i % n_streams])')}`")
    if is_number(t) and t < 0.9 * span:
        return (f"the clock stopped before every stream had finished: {n['sync']} waits for "
                "all the streams of the device (a stream's own synchronize waits for that "
                "stream only)")
    if is_number(t) and t < expected / 2:
        return f"the GPU had not finished when the clock was read: {n['sync']} first"
    return "warm up once, synchronize, then time all n_ops launches until every stream is done"


def check_time_on_streams(time_on_streams, framework: str = "torch", n_ops: int = 8) -> CheckResult:
    """4 points: 4 streams of small products take ceil(n/4) product times, for an n that is a
    multiple of 4 and one that is not (2: needs streams, x waited for, every stream
    finished), one stream takes n (1), a cold GPU is warmed up first (1)."""
    name = "time_on_streams"
    if (bad := framework_problem(name, 4, framework)) is not None:
        return bad
    # n_ops that is not a multiple of 4 as well: the streams then finish at different times
    # (the first ones hold one product more), so waiting for one stream only is seen
    uneven = n_ops - 1 if n_ops % 4 == 0 else n_ops + 1
    runs, errors = {}, {}           # each run on its own: a raise costs what reads it
    for key, n, streams in (("four", n_ops, 4), ("odd", uneven, 4), ("one", n_ops, 1)):
        try:
            runs[key] = _run(time_on_streams, framework, n, streams)
        except StudentError as e:
            errors[key] = student_failed(name, 4, e, framework)
    if not runs:
        return errors["four"]
    # the busiest stream holds ceil(n / 4) products, and they run one after another
    exp4, expo, exp1 = -(-n_ops // 4) * SMALL_S, -(-uneven // 4) * SMALL_S, n_ops * SMALL_S

    def fine(t, e, m):
        # a missing warm-up adds WARMUP_S to a time: it loses the warm-up point only
        return not any(v.kind == "race" for v in m.violations) and (
            close(t, e) or close(t, e + WARMUP_S))

    def raised(points, what, expected):
        r = next(errors[k] for k in ("four", "odd", "one") if k in errors)
        return (points, False, f"{what}: {r.message}", expected, "an exception", r.hint)

    parts = []
    if "four" in errors or "odd" in errors:
        parts.append(raised(2, "small products on 4 streams", f"{exp4 * 1e3:.0f} ms for "
                            f"{n_ops} products, {expo * 1e3:.0f} ms for {uneven}"))
    else:
        (four, m4, p4), (odd, mo, po) = runs["four"], runs["odd"]
        ok4 = fine(four, exp4, m4) and fine(odd, expo, mo)
        bad_t, bad_m, bad_p, bad_n, bad_e = ((odd, mo, po, uneven, expo) if fine(four, exp4, m4)
                                             else (four, m4, p4, n_ops, exp4))
        parts.append(
            (2, ok4, f"{bad_n} small products on 4 streams",
             f"{bad_e * 1e3:.0f} ms (4 fit on the GPU at once; the busiest stream holds "
             f"{-(-bad_n // 4)})", _ms(bad_t),
             _streams_hint(bad_t, bad_m, bad_p, 4, bad_e, framework)))
    if "one" in errors:
        parts.append(raised(1, f"{n_ops} small products on 1 stream", f"{exp1 * 1e3:.0f} ms"))
    else:
        one, m1, p1 = runs["one"]
        parts.append((1, fine(one, exp1, m1), f"{n_ops} small products on 1 stream",
                      f"{exp1 * 1e3:.0f} ms", _ms(one),
                      _streams_hint(one, m1, p1, 1, exp1, framework)))
    if errors:
        parts.append(raised(1, "the warm-up (read from every run)",
                            f"no {WARMUP_S * 1e3:.0f} ms first-launch cost in the time"))
    else:
        parts.append(
            (1, all(is_number(t) and t >= SMALL_S for t in (four, odd, one))
             and not any(close(t, e + WARMUP_S) for t, e in ((four, exp4), (odd, expo),
                                                            (one, exp1))),
             "a cold GPU was timed",
             f"no {WARMUP_S * 1e3:.0f} ms first-launch cost in the time", f"{_ms(four)}, {_ms(one)}",
             "launch one product and synchronize before you start the clock (a kernel's first "
             "launch pays a one-time cost)"))
    four = runs.get("four", (None,))[0]
    one = runs.get("one", (None,))[0]
    return result(name, 4, parts, f"{n_ops} small products: {_ms(four)} on 4 streams, "
                  f"{_ms(one)} on 1")


def check_speedups(stream_speedups, framework: str = "torch", n_ops: int = 8) -> CheckResult:
    """4 points: the speedup of 4 streams over 1 is about 4 for small products (2) and about
    1 for large ones (2). Each is paid only when the machine ran what it measures, at least
    ``n_ops`` products of that size on 4 streams and ``n_ops`` on 1, and the clock was read:
    a speedup returned without running and timing the products is not measured."""
    name = "stream_speedups"
    if (bad := framework_problem(name, 4, framework)) is not None:
        return bad
    fw, m = _device(framework, warmup_s=0.0)   # warming up is Task 1's: not graded twice
    small, large = (place(fw, np.eye(k, dtype=np.float32)) for k in (SMALL, LARGE))
    t0 = m.clock.now_ns
    try:
        out = call(stream_speedups, fw, m.clock.read, small, large, n_ops, 4)
    except StudentError as e:
        return student_failed(name, 4, e, framework)
    products = [o for o in m.compute_ops(t0) if o.name == "matmul"]
    timed = m.clock.reads > 0 or m.elapsed_calls > 0
    ran = {"small": timed and sum(o.width < 1 for o in products) >= 2 * n_ops,
           "large": timed and sum(o.width >= 1 for o in products) >= 2 * n_ops}
    unmeasured = ("the speedup was not measured: the GPU ran {} {} products and the clock was "
                  "{}read. Run time_on_streams on 4 streams and on 1 and divide the times")
    if not isinstance(out, dict) or not {"small", "large"} <= set(out):
        return CheckResult(name, 0, 4, "expected a dict with keys 'small' and 'large'",
                           seen=type(out).__name__)
    fmt = lambda v: f"{float(v):.2f}x" if is_number(v) else f"a {type(v).__name__}"  # noqa: E731
    if is_number(out["small"]) and close(out["small"], 0.25, 0.1):
        small_hint = "the speedup is inverted: speedup = time on 1 stream / time on n_streams streams"
    elif is_number(out["small"]) and close(out["small"], 1.0, 0.1):
        small_hint = ("the streams gave small products no speedup: time_on_streams must put them "
                      "on different streams and time until all are done (Task 1)")
    else:
        small_hint = "speedup = time on 1 stream / time on n_streams streams"
    never = "" if timed else "never "
    if not ran["small"]:
        small_hint = unmeasured.format(sum(o.width < 1 for o in products), "small", never)
    large_hint = None if ran["large"] else unmeasured.format(
        sum(o.width >= 1 for o in products), "large", never)
    parts = [
        (2, ran["small"] and close(out["small"], 4.0, 0.1), "speedup of 4 streams for small products",
         "about 4x (each fills a quarter of the GPU)", fmt(out["small"]), small_hint),
        (2, ran["large"] and close(out["large"], 1.0, 0.1), "speedup of 4 streams for large products",
         "about 1x (each fills the GPU)", fmt(out["large"]), large_hint or
         "speedup = time on 1 stream / time on n_streams streams, measured like the small case"),
    ]
    return result(name, 4, parts, f"small {fmt(out['small'])}, large {fmt(out['large'])}: "
                  "streams help only when operators leave the GPU idle")
