"""Simulated GPUs with a deterministic clock, behind the frameworks' own API.

An exercise's answer is framework code: ``def time_work(torch, clock, fn, *args)`` uses
``torch.cuda.Event``, ``torch.cuda.synchronize``, streams and copies. Graded, it gets the
simulated module this package builds (:func:`simulate`); on a GPU, the real ``torch`` (or
``paddle``) and ``time.perf_counter``. The simulated module implements the part of the API
that timing, streams, events and copies are written with, on simulated GPUs whose kernels
and copies take times a cost model fixes (:mod:`.engine`), so the same answer gets the same
numbers on every machine, every run; it raises an error naming any API it does not model.

The :class:`~.engine.Machine` stays with whoever built it (the grader): the clock, what each
device did (``ops``), the races and early reads it saw (``violations``). Nothing on the
objects an answer gets says how long anything took.

- :mod:`.engine`: the clock, the cost model, devices, streams, events, copy engines;
- :mod:`.tensor`: tensors (a NumPy value, where it lives, when it is written);
- :mod:`.torch_api`, :mod:`.paddle_api`: the two frameworks' modules, and
  :mod:`.torch_tensor`, :mod:`.paddle_tensor` their tensors;
- :mod:`.streams`: streams, events and stream contexts, shared by both.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .engine import Costs, Machine, Op, SimError, VirtualClock, Violation, garbage, ns
from .paddle_api import SimPaddle
from .tensor import SimTensor
from .torch_api import SimTorch

__all__ = ["simulate", "Machine", "Costs", "Op", "Violation", "SimError", "VirtualClock",
           "SimTensor", "SimTorch", "SimPaddle", "place", "fixed_kernel", "host_value",
           "device_value", "FRAMEWORKS"]

FRAMEWORKS = ("torch", "paddle")


def simulate(framework: str = "torch", gpus: int = 1, costs: Costs | None = None,
             parallel: bool = False, wrong_device: str = "raise") -> tuple[Any, Machine]:
    """``(module, machine)``: the simulated ``torch`` or ``paddle`` to hand to an answer, and
    the machine it runs on (keep it: it is how the grader sees what happened).

    ``parallel=True`` schedules like a graph executor (independent kernels on a device's
    default stream run side by side); ``wrong_device`` says whether an operation on tensors of
    two devices raises (as the frameworks do) or is recorded in ``machine.violations`` and
    computed anyway, so that the rest of an answer can still be graded."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework is one of {FRAMEWORKS}, not {framework!r}")
    m = Machine(gpus, costs, parallel, wrong_device)
    return (SimTorch(m) if framework == "torch" else SimPaddle(m)), m


def place(fw: Any, array: Any, device: int | None = 0, pinned: bool = False) -> SimTensor:
    """A tensor of ``fw`` holding ``array`` on GPU ``device`` (None: the host), already
    written: how a grader sets up inputs without spending virtual time."""
    from .paddle_tensor import PaddleTensor
    from .torch_tensor import TorchTensor

    kind = TorchTensor if isinstance(fw, SimTorch) else PaddleTensor
    return kind(fw, fw._m, np.array(array, copy=True), device, fw._m.clock.now_ns,
                pinned and device is None)


def fixed_kernel(seconds: float, width: float = 1.0, fn: Callable = lambda v: v * v,
                 name: str = "op") -> Callable:
    """An operation ``op(x)`` of known cost: one kernel of ``seconds`` filling ``width`` of the
    device on the current stream of ``x``'s device, computing ``fn(x)``. A plain function: an
    answer can call it and learns nothing else from it."""
    def op(x: Any) -> Any:
        if not isinstance(x, SimTensor):
            raise TypeError(f"{name} takes a tensor, got {type(x).__name__}")
        return x._run(name, fn, (x,), work=0, parallel=1, fixed=(seconds, width))

    op.__name__ = op.__qualname__ = name
    return op


def host_value(t: Any) -> np.ndarray | None:
    """What a host tensor holds now (garbage if its copy has not landed), or a NumPy array
    as given; None for anything else (a device tensor is not a host result)."""
    if isinstance(t, SimTensor):
        if t._dev is not None:
            return None
        return garbage(t._value) if t._ready_ns > t._m.clock.now_ns else t._value.copy()
    if isinstance(t, np.ndarray) and t.dtype.kind in "biufc":
        return t
    return None


def device_value(t: SimTensor) -> np.ndarray:
    """A tensor's value once everything has finished (the grader's view, no time spent)."""
    return t._value.copy()
