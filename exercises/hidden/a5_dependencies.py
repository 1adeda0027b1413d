"""Assignment 5's grading checks (instructor only: not importable from a student's kernel).

``run_dag`` runs on two simulated GPUs (:mod:`grader.sim`) whose products, additions and
copies take known times, so the schedule it builds is judged the same way on every machine:
by properties (the right result, products on both devices, no tensor used on a device it
does not live on, a makespan shorter than the same work on one device), never by wall-clock
time. A tensor used on the wrong device is recorded rather than raised, so the other points
can still be given.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from grader.checks.a5_dependencies import SIZE, device_names, make_inputs
from grader.checks.result import CheckResult
from grader.checks.simulated import NAMES, framework_problem, fresh
from grader.checks.support import StudentError, call
from grader.sim import Machine, host_value

PRODUCTS = 5           # U, V, X, Y, Z
RESULT_RTOL = 1e-4     # float32 products of standard-normal matrices, relative (Frobenius)
PRODUCT_S = 1.1e-3     # one SIZE x SIZE product
COPY_S = 0.14e-3       # one SIZE x SIZE float32 matrix, host <-> device or device <-> device
ADD_S = 0.09e-3


def _costs() -> dict:
    nbytes, n = SIZE * SIZE * 4, SIZE * SIZE
    return dict(flops=2 * SIZE ** 3 / PRODUCT_S, capacity=n, elems=n / ADD_S,
                copy_bw=nbytes / COPY_S, link_bw=nbytes / COPY_S, copy_latency_s=0.0,
                warmup_s=0.0, launch_s=5e-6, host_flops=2 * SIZE ** 3 / 4e-3,
                host_elems=n / 0.3e-3)


def expected(inputs: dict[str, np.ndarray]) -> np.ndarray:
    """``out`` computed on the host in float64: what every schedule must give."""
    key = hashlib.sha256(b"".join(np.ascontiguousarray(inputs[k]).tobytes() + repr(
        inputs[k].shape).encode() for k in "ABCD")).hexdigest()
    if key not in _EXPECTED:
        _EXPECTED[key] = _expected(inputs)
    return _EXPECTED[key]


_EXPECTED: dict = {}


def _expected(inputs: dict[str, np.ndarray]) -> np.ndarray:
    A, B, C, D = (inputs[k].astype(np.float64) for k in "ABCD")
    U, V = A @ B, C @ D
    return (U @ C) + (V @ A) + (U @ V)


@dataclass
class Run:
    """One run of a schedule on two fresh simulated GPUs."""

    value: Any
    error: Any            # the StudentError, or None
    machine: Machine
    makespan_s: float

    def products(self) -> list[int]:
        """Products per device."""
        ops = [o for o in self.machine.ops if o.kind == "compute" and o.name == "matmul"]
        return [sum(o.device == d for o in ops) for d in range(len(self.machine.gpus))]


def run(run_dag: Callable, framework: str = "torch", seed: int = 5) -> Run:
    fw, m = fresh(framework, gpus=2, wrong_device="record", **_costs())
    try:
        out, error = call(run_dag, fw, make_inputs(seed), device_names(framework)), None
    except StudentError as e:
        out, error = None, e
    value = host_value(out) if error is None else None     # as the caller reads it now
    return Run(value, error, m, m.clock.now_ns / 1e9)


def serial_schedule(torch, inputs, devices):
    """Everything on the first device: the baseline a two-device schedule must beat."""
    d = devices[0]
    A, B, C, D = (torch.from_numpy(inputs[k]).to(d) for k in "ABCD")
    U, V = A @ B, C @ D
    X, Y, Z = U @ C, V @ A, U @ V
    return (X + Y + Z).cpu().numpy()


_SERIAL: float | None = None


def serial_s() -> float:
    global _SERIAL
    if _SERIAL is None:
        _SERIAL = run(serial_schedule, "torch").makespan_s
    return _SERIAL


def _crashed(name: str, points: float, r: Run, framework: str) -> CheckResult:
    from grader.checks.simulated import student_failed

    res = student_failed(name, points, r.error, framework)
    return CheckResult(name, 0, points, f"run_dag raised, so this could not be checked: "
                       f"{res.message}", hint=res.hint)


def check_result(run_dag: Callable, framework: str = "torch", *, r: Run | None = None,
                 points: float = 3) -> CheckResult:
    name = "a5: result matches the single-device computation"
    if (bad := framework_problem(name, points, framework)) is not None:
        return bad
    r = r or run(run_dag, framework)
    if r.error is not None:
        return _crashed(name, points, r, framework)
    want = expected(make_inputs())
    if r.value is None or np.shape(r.value) != want.shape:
        return CheckResult(name, 0, points, "the result is not a host array of the right shape",
                           expected=f"a host array of shape {want.shape}",
                           seen="not on the host" if r.value is None else
                           f"shape {np.shape(r.value)}",
                           hint="return out as a NumPy array: copy it to the host first")
    got = np.asarray(r.value, dtype=np.float64)
    if np.isnan(got).any():
        race = any(v.kind == "race" for v in r.machine.violations)
        return CheckResult(name, 0, points, "the result holds garbage (NaN)",
                           expected="X + Y + Z", seen="NaN in the result",
                           hint="a kernel read a tensor another stream was still writing: make "
                                "the stream wait for it" if race else
                                "the result was read before its copy to the host had landed: "
                                "wait for it (a blocking copy, or synchronize) first")
    err = float(np.sqrt(np.sum((got - want) ** 2) / np.sum(want ** 2)))
    if err <= RESULT_RTOL:
        return CheckResult(name, points, points, f"relative error {err:.1e} <= {RESULT_RTOL:.0e}")
    return CheckResult(name, 0, points, "the result differs from X + Y + Z",
                       expected=f"relative error <= {RESULT_RTOL:.0e}", seen=f"relative error {err:.3g}",
                       hint="check each product's operands and their order: matrix products do "
                            "not commute (U @ V is not V @ U)")


def check_devices_used(run_dag: Callable, framework: str = "torch", *, r: Run | None = None,
                       points: float = 2) -> CheckResult:
    name = "a5: the five products ran on the devices, on both of them"
    if (bad := framework_problem(name, points, framework)) is not None:
        return bad
    r = r or run(run_dag, framework)
    if r.error is not None:
        return _crashed(name, points, r, framework)
    per_device = r.products()
    seen = f"products per device: {per_device}"
    if sum(per_device) < PRODUCTS:
        return CheckResult(name, 0, points, "not every product ran on a device",
                           expected=f"{PRODUCTS} products (U, V, X, Y, Z) on the devices",
                           seen=seen, hint="compute every product with tensors on a device "
                                           "(NumPy arrays and host tensors compute on the host)")
    if min(per_device) == 0:
        return CheckResult(name, points / 2, points, "all products ran on one device",
                           expected="both devices run products", seen=seen,
                           hint="U and V are independent: compute them on different devices")
    return CheckResult(name, points, points, seen)


def check_dependencies(run_dag: Callable, framework: str = "torch", *, r: Run | None = None,
                       points: float = 2) -> CheckResult:
    name = "a5: every operation used tensors that live on its own device"
    if (bad := framework_problem(name, points, framework)) is not None:
        return bad
    r = r or run(run_dag, framework)
    if r.error is not None:
        return _crashed(name, points, r, framework)
    v = [x.message for x in r.machine.violations if x.kind in ("wrong_device", "race")]
    if not v:
        return CheckResult(name, points, points, "no tensor was used on a device it does not "
                           "live on")
    return CheckResult(name, 0, points, f"{len(v)} operation(s) used a tensor of the other device",
                       expected="a tensor computed on one device is copied before the other "
                                "uses it (on a GPU this raises)",
                       seen=v[0], hint=f"copy it first: {NAMES[framework]['copy_to']}",
                       details=tuple(v[1:4]))


def _waits_before_last_product(r: Run) -> list[str]:
    m = r.machine
    products = [o for o in m.ops if o.kind == "compute" and o.name == "matmul"]
    if not products:
        return []
    last = max(o.launched_ns for o in products)
    return [why for why, t0, t1 in m.host_waits if t0 < last and t1 > t0]


def check_faster(run_dag: Callable, framework: str = "torch", *, r: Run | None = None,
                 points: float = 3) -> CheckResult:
    """Full points when the makespan beats one device by at least 10%; half when it beats it
    at all. Only a correct schedule with products on both devices, none of whose operations
    used a tensor of the other device, is compared: a missing copy is computed anyway by the
    simulator (a GPU raises), and the time it saves is time the schedule did not earn."""
    name = "a5: the two-device schedule finishes before the one-device one"
    if (bad := framework_problem(name, points, framework)) is not None:
        return bad
    r = r or run(run_dag, framework)
    if r.error is not None:
        return _crashed(name, points, r, framework)
    prereq = [check_result(run_dag, framework, r=r), check_devices_used(run_dag, framework, r=r),
              check_dependencies(run_dag, framework, r=r)]
    if not all(p.passed for p in prereq):
        return CheckResult(name, 0, points, "not compared: the schedule must first be correct, "
                           "run products on both devices and copy what it uses from the other "
                           "device (a skipped copy is time saved by what a GPU refuses)",
                           expected="the three checks above pass",
                           seen="; ".join(p.name.split(": ", 1)[1] for p in prereq if not p.passed),
                           hint="fix those first")
    serial, got = serial_s(), r.makespan_s
    seen = f"makespan {got * 1e3:.3f} ms vs {serial * 1e3:.3f} ms on one device"
    if got <= 0.9 * serial:
        return CheckResult(name, points, points, seen)
    waits = _waits_before_last_product(r)
    if waits:
        kinds = sorted(set(waits))
        hint = (f"the host waited {len(waits)} time(s) before it had queued the last product "
                f"({'; '.join(kinds[:3])}): queue the work of both devices before anything "
                "that waits. A copy from host memory to a device, .cpu(), .numpy(), .item(), "
                "a blocking copy and synchronize all wait for the device's queue; copy between "
                f"devices without waiting ({NAMES[framework]['copy_to']})")
    else:
        hint = ("the devices took turns instead of working together: start U and V on different "
                "devices before anything that depends on them")
    if got < serial:
        return CheckResult(name, points / 2, points, "faster, but by less than 10%",
                           expected=f"makespan <= {0.9 * serial * 1e3:.3f} ms", seen=seen, hint=hint)
    return CheckResult(name, 0, points, "no faster than one device",
                       expected=f"makespan < {serial * 1e3:.3f} ms", seen=seen, hint=hint)


def check_all(run_dag: Callable, framework: str = "torch") -> list[CheckResult]:
    """All of assignment 5's checks, from one run of ``run_dag``."""
    r = run(run_dag, framework) if framework in ("torch", "paddle") else None
    return [check_result(run_dag, framework, r=r), check_devices_used(run_dag, framework, r=r),
            check_dependencies(run_dag, framework, r=r), check_faster(run_dag, framework, r=r)]
