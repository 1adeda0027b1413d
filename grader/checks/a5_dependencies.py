"""Assignment 5: a computation with data dependencies, scheduled on two devices.

The computation (every matrix 256 x 256, float32)::

    U = A @ B        V = C @ D          # independent
    X = U @ C        Y = V @ A          # X needs U, Y needs V
    Z = U @ V                           # needs both: one of them must cross devices
    out = X + Y + Z

The student writes ``run_dag(devices, inputs) -> np.ndarray`` with the device interface of
:func:`grader.lab.get_devices` (``put``, ``submit``, ``get``, ``synchronize``), submitting
only :func:`matmul` and :func:`add` from this module. The checks run it on deterministic
virtual devices (:mod:`grader.checks.a5_vdevices`), so grading never depends on the speed
of the grading machine: the schedule is judged by properties (correct answer, both devices
used, no value read on a device it does not live on, virtual makespan shorter than the same
work on one device), never by wall-clock time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .a5_vdevices import VirtualClock, virtual_devices
from .result import CheckResult
from .support import StudentError, call

__all__ = ["matmul", "add", "make_inputs", "reference", "serial_schedule", "critical_path_ms",
           "run_virtual", "check_result", "check_devices_used", "check_dependencies",
           "check_faster", "grade", "SIZE", "PRODUCTS"]

SIZE = 256
PRODUCTS = 5           # U, V, X, Y, Z
RTOL = 1e-4            # float32 products of 256 x 256 standard-normal matrices, relative (Frobenius)


def matmul(x: Any, y: Any) -> Any:
    """``x @ y``: the one product the devices run (NumPy, PyTorch and Paddle alike)."""
    return x @ y


def add(x: Any, y: Any) -> Any:
    """``x + y``, element-wise."""
    return x + y


def make_inputs(seed: int = 5, size: int = SIZE) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal((size, size), dtype=np.float32) for k in "ABCD"}


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


def critical_path_ms() -> float:
    """Longest chain of dependent compute tasks (products then two adds), in virtual ms:
    no schedule on any number of devices can finish the compute faster than this."""
    from .a5_vdevices import ELEMS_PER_MS, FLOPS_PER_MS

    product = 2.0 * SIZE ** 3 / FLOPS_PER_MS
    addition = 3 * SIZE * SIZE / ELEMS_PER_MS
    return 2 * product + 2 * addition


@dataclass
class Run:
    """One run of a schedule on fresh virtual devices."""

    value: Any
    error: str
    clock: VirtualClock
    devices: list

    @property
    def makespan_ms(self) -> float:
        return self.clock.host_ms

    def compute_tasks(self) -> list[tuple[int, str]]:
        return [(dev, label) for kind, dev, label, _, _ in self.clock.log if kind == "compute"]


def run_virtual(run_dag: Callable, n: int = 2, seed: int = 5) -> Run:
    devices = virtual_devices(n)
    try:
        value, error = call(run_dag, devices, make_inputs(seed)), ""
    except StudentError as e:  # the student's code raised: graded as such, with what and where
        value, error = None, str(e)
    return Run(value, error, devices[0].clock, devices)


_SERIAL_MS: float | None = None


def serial_ms() -> float:
    global _SERIAL_MS
    if _SERIAL_MS is None:
        _SERIAL_MS = run_virtual(serial_schedule, n=1).makespan_ms
    return _SERIAL_MS


def _crashed(name: str, pts: float, run: Run) -> CheckResult:
    return CheckResult(name, 0, pts, "run_dag raised an exception, so this could not be checked",
                       expected="run_dag(devices, inputs) returns the result as a NumPy array",
                       seen=run.error, hint="run it on virtual_devices(2) in the notebook and "
                                            "read the traceback")


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


def grade(run_dag: Callable) -> list[CheckResult]:
    """All of assignment 5's checks, from one run of ``run_dag``."""
    run = run_virtual(run_dag)
    return [check_result(run_dag, run=run), check_devices_used(run_dag, run=run),
            check_dependencies(run_dag, run=run), check_faster(run_dag, run=run)]


def public_run_dag(run_dag: Callable) -> CheckResult:
    """Quick and lenient: it runs on two virtual devices and returns a 256 x 256 array."""
    name = "a5 (public): run_dag runs on two virtual devices"
    run = run_virtual(run_dag)
    if run.error:
        return _crashed(name, 1, run)
    shape = np.shape(run.value) if run.value is not None else None
    if shape != (SIZE, SIZE):
        return CheckResult(name, 0, 1, "wrong return value", expected=f"an array of shape {(SIZE, SIZE)}",
                           seen=f"{type(run.value).__name__} of shape {shape}",
                           hint="return device.get(...) of the final sum")
    return CheckResult(name, 1, 1, f"returns a {SIZE} x {SIZE} array; virtual makespan "
                       f"{run.makespan_ms:.3f} ms (one device: {serial_ms():.3f} ms)")
