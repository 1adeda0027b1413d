"""Assignment 8: choose placements for the layers of an MLP and predict their communication.

The reference is the auto-parallel chapter's planner (:mod:`grader.lab.planner`): its
layout rules (``"R"`` replicated, ``"col"`` split by output features, ``"row"`` split by
input features; activations ``R``/``S``/``P``) and its cost model. The student writes

- ``predict_communication(dims, placements, batch, tp=2, dp=1)``: every collective of one
  training step as ``(op, phase, size_bytes)``, with ``op`` in ``all_reduce``,
  ``all_gather``, ``reduce_scatter``; ``phase`` in ``fwd``, ``bwd``, ``dp`` (the
  data-parallel gradient all-reduce); ``size_bytes`` the full (unsharded) float32 tensor.
  Graded on six configurations, half a point for the right collectives in the right
  phases, half for their sizes; the order of the list is not graded;
- ``choose_strategy(dims, batch, cluster) -> (dp, tp, placements)`` for 2 devices: graded on
  three scenarios against the planner's fastest prediction (ties accepted).

This module holds what a student's notebook may import (the public checks and what
they share with the hidden ones); the graded checks are the course's, in
``exercises/hidden/a8_placements.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

from typing import Any, Callable

from ..lab import planner
from .result import CheckResult
from .support import StudentError, call

__all__ = ["SCENARIOS", "public_predict", "public_choose"]

MLP = [1024, 4096, 1024]
SCENARIOS = [  # (label, dims, batch, cluster): a clear winner in each (>= 1.2x the runner-up)
    ("8 tokens over NVLink", MLP, 8, planner.with_devices(planner.PRESETS["8 GPUs NVLink"], 2)),
    ("1024 tokens over NVLink", MLP, 1024, planner.with_devices(planner.PRESETS["8 GPUs NVLink"], 2)),
    ("65536 tokens over PCIe", MLP, 65536, planner.with_devices(planner.PRESETS["8 GPUs PCIe"], 2)),
]


def _normalise(entries: Any) -> list[tuple[str, str, int]]:
    out = []
    for e in entries:
        op, phase, size = e
        out.append((str(op), str(phase), int(size)))
    return out


def _as_strategy(choice: Any) -> planner.Strategy:
    if isinstance(choice, planner.Strategy):
        return choice
    dp, tp, placements = choice
    return planner.Strategy(int(dp), int(tp), tuple(placements))


def public_predict(predict_communication: Callable) -> CheckResult:
    name = "a8 (public): predict_communication returns (op, phase, size_bytes) tuples"
    try:
        seen = _normalise(call(predict_communication, [8, 16, 4], ("col", "row"), 4, tp=2, dp=1))
    except (StudentError, TypeError, ValueError) as e:
        return CheckResult(name, 0, 1, str(e), expected="a list of (op, phase, size_bytes)",
                           hint="return e.g. [('all_reduce', 'fwd', 64)]")
    bad = [e for e in seen if e[0] not in ("all_reduce", "all_gather", "reduce_scatter")
           or e[1] not in ("fwd", "bwd", "dp")]
    if bad:
        return CheckResult(name, 0, 1, "unknown collective or phase", seen=str(bad),
                           expected="op in all_reduce/all_gather/reduce_scatter, phase in fwd/bwd/dp",
                           hint="spell them as in the table above")
    return CheckResult(name, 1, 1, f"returns {seen}")


def public_choose(choose_strategy: Callable) -> CheckResult:
    name = "a8 (public): choose_strategy returns (dp, tp, placements)"
    label, dims, batch, cluster = SCENARIOS[1]
    try:
        strat = _as_strategy(call(choose_strategy, list(dims), batch, cluster))
    except (StudentError, TypeError, ValueError) as e:
        return CheckResult(name, 0, 1, str(e), expected="(dp, tp, placements)",
                           hint="return e.g. (1, 2, ('col', 'row'))")
    return CheckResult(name, 1, 1, f"returns {strat} for {label}")


