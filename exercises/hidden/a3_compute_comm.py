"""Hidden checks of assignment 3 (the public ones: ``grader.checks.a3_compute_comm``)."""
from __future__ import annotations

import numpy as np

from grader.checks.a3_compute_comm import COPY_S, N, _affine, _ms, _run
from grader.checks.result import CheckResult
from grader.checks.support import StudentError, close, failed, result
from grader.lab.timeline import Timeline

__all__ = ["check_sequential", "check_overlapped"]


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
