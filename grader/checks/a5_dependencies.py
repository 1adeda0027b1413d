"""Assignment 5 (public part): a computation with data dependencies, on two devices.

The computation (every matrix 128 x 128, float32)::

    U = A @ B        V = C @ D          # independent
    X = U @ C        Y = V @ A          # X needs U, Y needs V
    Z = U @ V                           # needs both: one of them must cross devices
    out = X + Y + Z

Students write ``run_dag(torch, inputs, devices)`` in PyTorch or Paddle: ``inputs`` holds the
NumPy arrays A, B, C, D, ``devices`` the names of the two devices to use. Graded, it runs on
two simulated GPUs (:mod:`grader.sim`), where using a tensor on the wrong device is
recorded (and computed anyway, so that the rest can be graded) instead of raising as on a
GPU. This public part has the inputs, the devices' names and a quick check.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..sim import host_value
from .result import CheckResult
from .simulated import framework_problem, fresh, student_failed
from .support import StudentError, call

__all__ = ["make_inputs", "device_names", "public_run_dag", "SIZE"]

SIZE = 128


def make_inputs(seed: int = 5, size: int = SIZE) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal((size, size), dtype=np.float32) for k in "ABCD"}


def device_names(framework: str) -> tuple[str, str]:
    return ("cuda:0", "cuda:1") if framework == "torch" else ("gpu:0", "gpu:1")


def public_run_dag(run_dag: Callable, framework: str = "torch") -> CheckResult:
    """Quick and lenient: it runs on two simulated GPUs and returns a SIZE x SIZE host array."""
    name = "run_dag runs on two simulated GPUs"
    if (bad := framework_problem(name, 1, framework)) is not None:
        return bad
    fw, m = fresh(framework, gpus=2, wrong_device="record", warmup_s=0.0)
    try:
        out = call(run_dag, fw, make_inputs(), device_names(framework))
    except StudentError as e:
        return student_failed(name, 1, e, framework)
    value: Any = host_value(out)
    if value is None or np.shape(value) != (SIZE, SIZE):
        return CheckResult(name, 0, 1, "wrong return value",
                           expected=f"a host array (or host tensor) of shape {(SIZE, SIZE)}",
                           seen=f"a {type(out).__name__}" + (f" of shape {np.shape(value)}"
                                                            if value is not None else
                                                            " that is not on the host"),
                           hint="return out as a NumPy array (copy it to the host first)")
    # the formula of the notebook, on the host in float64 (as its last cell compares)
    A, B, C, D = (make_inputs()[k].astype(np.float64) for k in "ABCD")
    U, V = A @ B, C @ D
    want = U @ C + V @ A + U @ V
    got = np.asarray(value, dtype=np.float64)
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want)) if np.isfinite(got).all() \
        else float("nan")
    if not err <= 1e-4:
        return CheckResult(name, 0, 1, "out is not (U @ C) + (V @ A) + (U @ V)",
                           expected="relative error <= 1e-4",
                           seen="garbage (NaN) in the result" if np.isnan(err) else
                           f"relative error {err:.3g}",
                           hint="the result was read before its copy landed, or a stream read a "
                                "tensor still being written" if np.isnan(err) else
                                "check each product's operands and their order (U @ V is not "
                                "V @ U)", advisory=True)
    return CheckResult(name, 1, 1, f"returns a {SIZE} x {SIZE} host array equal to the "
                       "formula's (the grading checks look at the schedule too)")
