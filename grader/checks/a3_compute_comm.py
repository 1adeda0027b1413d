"""Assignment 3: computation and communication at the same time.

Students write ``sequential(device, clock, op, xs)`` and ``overlapped(device, clock, op,
xs)``; each computes ``op(x)`` for every ``x`` on the device, brings every result to the
host and returns ``(results, seconds)``. On the virtual device kernels and copies take
known times, so the checks see whether results were read before their copy landed (NaN),
whether the clock was read before the work was done, whether copies overlapped
computation, and how many copies there were.
"""
from __future__ import annotations

import numpy as np

from ..lab.sim import Kernel, virtual_devices
from ..lab.timeline import Timeline
from .result import CheckResult
from .support import StudentError, call, close, failed, result

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


def _results_ok(results, xs_host) -> tuple[bool, str]:
    try:
        arrs = [np.asarray(r, dtype=np.float64) for r in results]
    except Exception as e:  # noqa: BLE001
        return False, f"results are not arrays ({e})"
    if len(arrs) != len(xs_host):
        return False, f"{len(arrs)} results for {len(xs_host)} inputs"
    if any(np.isnan(a).any() for a in arrs):
        return False, f"{sum(np.isnan(a).any() for a in arrs)} of {len(arrs)} results hold NaN"
    bad = [i for i, (a, x) in enumerate(zip(arrs, xs_host)) if not np.allclose(a, _affine(x.astype(np.float64)))]
    return (not bad), (f"results {bad} differ from op(x)" if bad else "all results equal op(x)")


def _timeline(recs) -> Timeline:
    tl = Timeline("run")
    tl.add_records("compute", [r for r in recs if r.kind == "compute"])
    tl.add_records("copy", [r for r in recs if r.kind == "copy"])
    return tl


def _ms(t) -> str:
    return f"{float(t) * 1e3:.2f} ms" if isinstance(t, (int, float, np.floating)) else repr(t)


def check_sequential(sequential) -> CheckResult:
    """3 points: right results (1), the time is the whole run (1), N copies (1)."""
    name = "sequential"
    try:
        (results, secs), xs_host, recs, truth = _run(sequential)
    except StudentError as e:
        return failed(name, 3, e)
    ok, seen = _results_ok(results, xs_host)
    copies = sum(r.kind == "copy" for r in recs)
    parts = [
        (1, ok, "results", "op(x) for every x, in order", seen,
         "copy each result to the host (device.get or copy_to_host and wait)"),
        (1, close(secs, truth), "time of the run", f"{_ms(truth)} (until the last copy landed)",
         _ms(secs), "synchronize before reading the clock the second time"),
        (1, copies == N, "number of copies to the host", str(N), str(copies),
         "copy each result once"),
    ]
    return result(name, 3, parts, f"{N} results in {_ms(secs)}")


def check_overlapped(overlapped) -> CheckResult:
    """5 points: right results (2: NaN means read before the copy landed), the time is the
    whole run (1), copies overlap computation (1), N copies (1)."""
    name = "overlapped"
    try:
        (results, secs), xs_host, recs, truth = _run(overlapped)
    except StudentError as e:
        return failed(name, 5, e)
    ok, seen = _results_ok(results, xs_host)
    tl = _timeline(recs)
    copies = sum(r.kind == "copy" for r in recs)
    ov = tl.overlap("compute", "copy")
    want_ov = (N - 1) * COPY_S  # every copy but the last runs beside a kernel
    parts = [
        (2, ok, "results", "op(x) for every x, in order", seen,
         "a non-blocking copy has landed only after synchronize() (or buffer.wait()); read "
         "the buffers after that" if "NaN" in seen else "return the host copies, in order"),
        (1, close(secs, truth), "time of the run", f"{_ms(truth)} (until the last copy landed)",
         _ms(secs), "synchronize before reading the clock the second time"),
        (1, ov >= 0.9 * want_ov, "copies overlapping computation",
         f"about {_ms(want_ov)} of overlap", _ms(ov),
         "queue every kernel and start each copy with copy_to_host(y, non_blocking=True) "
         "without waiting; a blocking copy (or device.get) stops the host from queueing the "
         "next kernel"),
        (1, copies == N, "number of copies to the host", str(N), str(copies),
         "copy each result once (reading a HostBuffer is not a copy; device.get is)"),
    ]
    return result(name, 5, parts, f"{N} results in {_ms(secs)}, {_ms(ov)} of copying hidden "
                  "behind computation")


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
