"""Assignment 3 (public checks): computation and communication at the same time.

Students write, in PyTorch or Paddle, ``sequential(torch, clock, op, xs)`` and
``overlapped(torch, clock, op, xs)``: each computes ``op(x)`` for every ``x`` on the GPU,
brings every result to the host and returns ``(results, seconds)``. These quick checks run
them once on a simulated GPU (:mod:`grader.sim`) and say whether they run and return
one host result per input.
"""
from __future__ import annotations

import numpy as np

from ..sim import fixed_kernel, host_value, place
from .result import CheckResult
from .simulated import framework_problem, fresh, ms, stopped_early, student_failed
from .support import StudentError, call

N = 4


def _public(fn, name: str, framework: str) -> CheckResult:
    title = f"{name} runs"
    if (bad := framework_problem(title, 1, framework)) is not None:
        return bad
    fw, m = fresh(framework, warmup_s=0.0)
    xs = [place(fw, np.full((8, 8), i, np.float32)) for i in range(N)]
    op = fixed_kernel(0.002, fn=lambda v: 2 * v + 1, name="op")
    t0 = m.clock.now_ns
    try:
        out = call(fn, fw, m.clock.read, op, xs)
    except StudentError as e:
        return student_failed(title, 1, e, framework)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], list)):
        return CheckResult(title, 0, 1, f"{name} must return (list of results, seconds)",
                           seen=type(out).__name__)
    results, secs = out
    on_host = sum(host_value(r) is not None for r in results)
    if len(results) != N or on_host != N:
        return CheckResult(title, 0, 1, f"return one host result per input ({N})",
                           seen=f"{len(results)} results, {on_host} of them on the host")
    # op(x) here is 2 x + 1 on inputs full of i: what the caller reads now must be that
    try:
        values = [np.asarray(host_value(r), dtype=np.float64) for r in results]
    except (TypeError, ValueError):
        values = []
    if len(values) != N or any(v.shape != (8, 8) or not np.allclose(v, 2 * i + 1)
                               for i, v in enumerate(values)):
        garbage = any(np.isnan(v).any() for v in values)
        return CheckResult(title, 0, 1, "the results are not op(x), in order",
                           expected=f"op(x) = 2 x + 1 for each of the {N} inputs",
                           seen="garbage (NaN) in the results" if garbage else "other values",
                           hint="they were read before their copies landed (or copied before "
                                "the product was computed)" if garbage else
                                "return op(x) for every x, in order", advisory=True)
    if (early := stopped_early(title, secs, m, t0, framework)) is not None:
        return early
    return CheckResult(title, 1, 1, f"{N} host results, {ms(secs, 2)} (the grading checks "
                       "check more)")


def public_sequential(sequential, framework: str = "torch") -> CheckResult:
    return _public(sequential, "sequential", framework)


def public_overlapped(overlapped, framework: str = "torch") -> CheckResult:
    return _public(overlapped, "overlapped", framework)
