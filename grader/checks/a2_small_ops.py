"""Assignment 2 (public checks): parallelism on one GPU helps when operators are small.

Students write, in PyTorch or Paddle, ``time_on_streams(torch, clock, x, n_ops, n_streams)``
(products ``x @ x`` spread over streams) and ``stream_speedups(torch, clock, small, large,
n_ops, n_streams)``. These quick checks run them once on a simulated GPU
(:mod:`grader.sim`) and say whether they run and return the right kind of value.
"""
from __future__ import annotations

import numpy as np

from ..sim import place
from .result import CheckResult
from .simulated import framework_problem, fresh, is_number, ms, stopped_early, student_failed
from .support import StudentError, call


def _public_device(framework: str):
    # a 32 x 32 product fills a quarter of this GPU, a 64 x 64 one all of it
    return fresh(framework, warmup_s=0.0, capacity=64 * 64, flops=6.5e7)


def public_time_on_streams(time_on_streams, framework: str = "torch") -> CheckResult:
    name = "time_on_streams runs"
    if (bad := framework_problem(name, 1, framework)) is not None:
        return bad
    fw, m = _public_device(framework)
    x = place(fw, np.eye(32, dtype=np.float32))
    t0 = m.clock.now_ns
    try:
        t = call(time_on_streams, fw, m.clock.read, x, 4, 2)
    except StudentError as e:
        return student_failed(name, 1, e, framework)
    if not is_number(t) or t <= 0:
        return CheckResult(name, 0, 1, "time_on_streams must return seconds as a positive "
                           "float", seen=ms(t))
    if (early := stopped_early(name, t, m, t0, framework)) is not None:
        return early
    return CheckResult(name, 1, 1, f"{ms(t)} for 4 small products on 2 streams")


def public_speedups(stream_speedups, framework: str = "torch") -> CheckResult:
    name = "stream_speedups runs"
    if (bad := framework_problem(name, 1, framework)) is not None:
        return bad
    fw, m = _public_device(framework)
    small, large = (place(fw, np.eye(k, dtype=np.float32)) for k in (32, 64))
    try:
        out = call(stream_speedups, fw, m.clock.read, small, large, 4, 2)
    except StudentError as e:
        return student_failed(name, 1, e, framework)
    if not isinstance(out, dict) or not {"small", "large"} <= set(out):
        return CheckResult(name, 0, 1, "return a dict with keys 'small' and 'large'",
                           seen=type(out).__name__)
    shown = {k: (f"{float(v):.2f}x" if is_number(v) else type(v).__name__)
             for k, v in out.items() if k in ("small", "large")}
    return CheckResult(name, 1, 1, f"it returned {shown} (2 streams, 4 products)")
