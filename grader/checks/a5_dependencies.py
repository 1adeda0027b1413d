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

This module holds what a student's notebook may import (the public checks and what
they share with the hidden ones); the graded checks are the course's, in
``exercises/hidden/a5_dependencies.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .a5_vdevices import VirtualClock, virtual_devices
from .result import CheckResult
from .support import StudentError, call

__all__ = ["matmul", "add", "make_inputs", "critical_path_ms", "Run", "run_virtual",
           "public_run_dag", "SIZE", "PRODUCTS"]

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


def _crashed(name: str, pts: float, run: Run) -> CheckResult:
    return CheckResult(name, 0, pts, "run_dag raised an exception, so this could not be checked",
                       expected="run_dag(devices, inputs) returns the result as a NumPy array",
                       seen=run.error, hint="run it on virtual_devices(2) in the notebook and "
                                            "read the traceback")


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
                       f"{run.makespan_ms:.3f} ms (the compute's critical path alone: "
                       f"{critical_path_ms():.3f} ms)")
