"""Assignment 3: computation and communication at the same time.

Students write ``sequential(device, clock, op, xs)`` and ``overlapped(device, clock, op,
xs)``; each computes ``op(x)`` for every ``x`` on the device, brings every result to the
host and returns ``(results, seconds)``. On the virtual device kernels and copies take
known times, so the checks see whether results were read before their copy landed (NaN),
whether the clock was read before the work was done, whether copies overlapped
computation, and how many copies there were.

This module holds what a student's notebook may import (the public checks and what
they share with the hidden ones); the graded checks are the course's, in
``exercises/hidden/a3_compute_comm.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

import numpy as np

from ..lab.sim import Kernel, virtual_devices
from .result import CheckResult
from .support import StudentError, call, failed

KERNEL_S, COPY_S, N = 0.010, 0.008, 6
SHAPE = (32, 32)


def _affine(x):
    return 2 * x + 1


def test_kernel() -> Kernel:
    return Kernel("affine", _affine, KERNEL_S)


def _device():
    nbytes = int(np.prod(SHAPE)) * 4
    plan = virtual_devices(1, warmup_seconds=0.05, bandwidth=nbytes / COPY_S, copy_latency=0)
    dev, clock = plan[0], plan.clock
    xs_host = [np.full(SHAPE, i, np.float32) for i in range(N)]
    xs = [dev.put(x) for x in xs_host]
    dev.submit(test_kernel(), xs[0])     # warm the kernel up: warm-up is assignment 1's topic
    dev.synchronize()
    return dev, clock, xs, xs_host


def _run(fn):
    dev, clock, xs, xs_host = _device()
    t0 = clock.now_ns
    out = call(fn, dev, clock, test_kernel(), xs)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise StudentError(f"{fn.__name__} must return (results, seconds), got {type(out).__name__}")
    dev.synchronize()
    recs = [r for r in dev.records if r.start_ns >= t0]
    return out, xs_host, recs, (clock.now_ns - t0) / 1e9


def _ms(t) -> str:
    return f"{float(t) * 1e3:.2f} ms" if isinstance(t, (int, float, np.floating)) else repr(t)


def _public(fn, name: str) -> CheckResult:
    try:
        (res, secs), *_ = _run(fn)
    except StudentError as e:
        return failed(f"{name} runs", 1, e, "fix the error above")
    if len(res) != N:
        return CheckResult(f"{name} runs", 0, 1, f"return one result per input ({N})", seen=str(len(res)))
    return CheckResult(f"{name} runs", 1, 1, f"{N} results, {_ms(secs)} (hidden tests check more)")


def public_sequential(sequential) -> CheckResult:
    return _public(sequential, "sequential")


def public_overlapped(overlapped) -> CheckResult:
    return _public(overlapped, "overlapped")
