"""Assignment 1 (public checks): does the framework run 8 independent operations in parallel?

Students write, in PyTorch or Paddle, ``time_work(torch, clock, fn, *args, warmup=1,
repeats=3)`` (median seconds of ``fn(*args)`` on the GPU) and
``independent_ops_experiment(torch, clock, x, n=8)``. These quick checks run them once on a
simulated GPU (:mod:`grader.sim`) and say whether they run and return the right kind
of value; the grading checks are not in the course package.
"""
from __future__ import annotations

import numpy as np

from ..sim import fixed_kernel, place
from .result import CheckResult
from .simulated import framework_problem, fresh, is_number, ms, student_failed
from .support import StudentError, call

PUBLIC_OP_S = 0.010     # what the public check's operation takes


def public_time_work(time_work, framework: str = "torch") -> CheckResult:
    """Quick feedback: time_work runs on a simulated GPU and returns seconds."""
    name = "time_work runs"
    if (bad := framework_problem(name, 1, framework)) is not None:
        return bad
    fw, m = fresh(framework, warmup_s=0.0)
    x = place(fw, np.ones((4, 4), np.float32))
    try:
        t = call(time_work, fw, m.clock.read, fixed_kernel(PUBLIC_OP_S, name="op"), x,
                 warmup=1, repeats=2)
    except StudentError as e:
        return student_failed(name, 1, e, framework)
    if not is_number(t) or t <= 0:
        return CheckResult(name, 0, 1, "time_work must return seconds as a positive float",
                           seen=ms(t))
    # the order of magnitude only: the operation's time is the one thing this check tells
    if not PUBLIC_OP_S / 2 <= t <= 2 * PUBLIC_OP_S:
        return CheckResult(
            name, 0, 1, f"{ms(t)} for an operation of {PUBLIC_OP_S * 1e3:.0f} ms",
            expected=f"about {PUBLIC_OP_S * 1e3:.0f} ms", seen=ms(t),
            hint=("far less than the operation takes: was the clock read before the GPU had "
                  "finished?" if t < PUBLIC_OP_S / 2 else
                  "far more than the operation takes: milliseconds instead of seconds, or "
                  "the sum of the repeats?"), advisory=True)
    return CheckResult(name, 1, 1, f"it gave {ms(t)} for an operation of "
                       f"{PUBLIC_OP_S * 1e3:.0f} ms (the grading checks try more cases)")


def public_experiment(independent_ops_experiment, framework: str = "torch") -> CheckResult:
    """Quick feedback: the experiment runs and returns the dict it should."""
    name = "experiment runs"
    if (bad := framework_problem(name, 1, framework)) is not None:
        return bad
    fw, m = fresh(framework, warmup_s=0.0)
    x = place(fw, np.full((16, 16), 0.25, np.float32))
    try:
        out = call(independent_ops_experiment, fw, m.clock.read, x, n=4)
    except StudentError as e:
        return student_failed(name, 1, e, framework)
    if not isinstance(out, dict) or not {"one", "all", "parallel"} <= set(out):
        return CheckResult(name, 0, 1, "return a dict with keys 'one', 'all' and 'parallel'",
                           seen=type(out).__name__)
    shown = {k: (ms(v) if k != "parallel" else v) for k, v in out.items()
             if k in ("one", "all", "parallel")}
    return CheckResult(name, 1, 1, f"it returned {shown} on a simulated GPU")
