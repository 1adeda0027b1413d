"""Hidden checks of assignment 5 (the public ones: ``grader.checks.a5_dependencies``): the
reference result, the one-device schedule a two-device one must beat, and the checks."""
from __future__ import annotations

from typing import Callable

import numpy as np

from grader.checks.a5_dependencies import (PRODUCTS, RTOL, Run, _crashed, add,
                                           critical_path_ms, make_inputs, matmul, run_virtual)
from grader.checks.result import CheckResult

__all__ = ["reference", "serial_schedule", "serial_ms", "check_result", "check_devices_used",
           "check_dependencies", "check_faster", "check_all"]


def reference(inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The plain single-device computation, in float64 for a trustworthy reference."""
    A, B, C, D = (inputs[k].astype(np.float64) for k in "ABCD")
    U, V = A @ B, C @ D
    return (U @ C) + (V @ A) + (U @ V)


def serial_schedule(devices: list, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Everything on ``devices[0]``: the baseline a two-device schedule must beat."""
    d = devices[0]
    A, B, C, D = (d.put(inputs[k]) for k in "ABCD")
    U, V = d.submit(matmul, A, B), d.submit(matmul, C, D)
    X, Y, Z = d.submit(matmul, U, C), d.submit(matmul, V, A), d.submit(matmul, U, V)
    return d.get(d.submit(add, d.submit(add, X, Y), Z))


_SERIAL_MS: float | None = None


def serial_ms() -> float:
    global _SERIAL_MS
    if _SERIAL_MS is None:
        _SERIAL_MS = run_virtual(serial_schedule, n=1).makespan_ms
    return _SERIAL_MS


def check_result(run_dag: Callable, *, run: Run | None = None, points: float = 3) -> CheckResult:
    name = "a5: result matches the single-device computation"
    run = run or run_virtual(run_dag)
    if run.error:
        return _crashed(name, points, run)
    want = reference(make_inputs())
    try:
        got = np.asarray(run.value, dtype=np.float64)
    except (TypeError, ValueError):
        got = np.asarray([])
    if got.shape != want.shape:
        return CheckResult(name, 0, points, "the result has the wrong shape",
                           expected=f"an array of shape {want.shape}", seen=f"shape {got.shape}",
                           hint="return out = X + Y + Z as a NumPy array (device.get(ref))")
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    if err <= RTOL:
        return CheckResult(name, points, points, f"relative error {err:.1e} <= {RTOL:.0e}")
    return CheckResult(name, 0, points, "the result differs from X + Y + Z",
                       expected=f"relative error <= {RTOL:.0e}", seen=f"relative error {err:.3g}",
                       hint="check each product's operands and their order: matrix products do "
                            "not commute (U @ V is not V @ U)")


def check_devices_used(run_dag: Callable, *, run: Run | None = None, points: float = 2) -> CheckResult:
    name = "a5: the five products ran on the devices, on both of them"
    run = run or run_virtual(run_dag)
    if run.error:
        return _crashed(name, points, run)
    tasks = run.compute_tasks()
    products = [(d, l) for d, l in tasks if l == "matmul"]
    other = sorted({l for _, l in tasks if l not in ("matmul", "add")})
    per_device = [sum(1 for d, _ in products if d == i) for i in range(len(run.devices))]
    seen = f"products per device: {per_device}" + (f"; other tasks: {other}" if other else "")
    if other:
        return CheckResult(name, 0, points, "tasks other than matmul/add were submitted",
                           expected="devices run only matmul and add from grader.checks.a5_dependencies",
                           seen=seen, hint="submit one product per task: dev.submit(matmul, x, y)")
    if len(products) < PRODUCTS:
        return CheckResult(name, 0, points, "not every product ran on a device",
                           expected=f"{PRODUCTS} matmul tasks (U, V, X, Y, Z)", seen=seen,
                           hint="compute every product with dev.submit(matmul, ...), not on the host")
    if min(per_device) == 0:
        return CheckResult(name, points / 2, points, "all products ran on one device",
                           expected="both devices run products", seen=seen,
                           hint="U and V are independent: start them on different devices")
    return CheckResult(name, points, points, seen)


def check_dependencies(run_dag: Callable, *, run: Run | None = None, points: float = 2) -> CheckResult:
    name = "a5: every task read values that live on its own device"
    run = run or run_virtual(run_dag)
    if run.error:
        return _crashed(name, points, run)
    v = run.clock.violations
    if not v:
        return CheckResult(name, points, points, "no value was used on a device it does not live on")
    return CheckResult(name, 0, points, f"{len(v)} value(s) used on the wrong device",
                       expected="a value computed on one device is copied before another uses it",
                       seen=v[0], hint="copy through the host: dst.put(src.get(ref))",
                       details=tuple(v[1:4]))


def check_faster(run_dag: Callable, *, run: Run | None = None, points: float = 3) -> CheckResult:
    """Full points when the virtual makespan beats one device by at least 10%; half when it
    beats it at all. Only a correct, on-device, violation-free schedule is compared."""
    name = "a5: the two-device schedule finishes before the one-device one"
    run = run or run_virtual(run_dag)
    if run.error:
        return _crashed(name, points, run)
    prereq = [check_result(run_dag, run=run), check_devices_used(run_dag, run=run),
              check_dependencies(run_dag, run=run)]
    if not all(r.passed for r in prereq):
        return CheckResult(name, 0, points, "not compared: the schedule must first be correct, "
                           "on both devices and free of wrong-device reads",
                           expected="the three checks above pass",
                           seen="; ".join(r.name.split(": ", 1)[1] for r in prereq if not r.passed),
                           hint="fix those first")
    serial, got = serial_ms(), run.makespan_ms
    seen = (f"virtual makespan {got:.3f} ms vs {serial:.3f} ms on one device "
            f"(critical path of the compute alone: {critical_path_ms():.3f} ms)")
    if got <= 0.9 * serial:
        return CheckResult(name, points, points, seen)
    hint = ("submit returns at once: queue work on both devices before waiting on any result "
            "(future.result(), get, synchronize); do all the puts before the first submit, "
            "since a put waits for its device's queue")
    if got < serial:
        return CheckResult(name, points / 2, points, "faster, but by less than 10%",
                           expected=f"makespan <= {0.9 * serial:.3f} ms", seen=seen, hint=hint)
    return CheckResult(name, 0, points, "no faster than one device",
                       expected=f"makespan < {serial:.3f} ms", seen=seen, hint=hint)


def check_all(run_dag: Callable) -> list[CheckResult]:
    """All of assignment 5's checks, from one run of ``run_dag``."""
    run = run_virtual(run_dag)
    return [check_result(run_dag, run=run), check_devices_used(run_dag, run=run),
            check_dependencies(run_dag, run=run), check_faster(run_dag, run=run)]
