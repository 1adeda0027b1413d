"""Assignment 8: placements and their communication, rank by rank and link by link.

An MLP of bias-free ``Linear`` layers is trained on ``tp * dp`` ranks: ``dp`` replicas,
each a group of ``tp`` ranks that shares every layer by its placement (``"R"`` replicated,
``"col"`` split by output features, ``"row"`` split by input features). The notebook states
the layout rules. The student writes

- ``link_bytes(dims, placements, batch, tp=2, dp=1, order="tp") -> {(src, dst): bytes}``:
  what each rank sends to each other rank in one training step, with ring collectives
  inside the tp groups and the dp groups, ranks numbered by ``order``;
- ``choose_order(dims, placements, batch, tp, dp, per_node) -> "tp" | "dp"``: the order
  that puts fewer bytes on the links between nodes of ``per_node`` devices.

The chapter's planner prices the collectives of a placement; it does not say which rank
sends what to which rank, nor where the ranks sit, which is what this assignment asks.

This module holds what a student's notebook may import (the public checks and what
they share with the hidden ones); the graded checks and the reference are the course's, in
``exercises/hidden/a8_placements.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

from typing import Any, Callable

from .result import CheckResult
from .support import StudentError, call

__all__ = ["ORDERS", "normalise_links", "public_link_bytes", "public_choose_order"]

ORDERS = ("tp", "dp")


def normalise_links(links: Any) -> dict[tuple[int, int], float]:
    """``{(src, dst): bytes}`` with int ranks and float bytes, links of 0 bytes left out;
    ``TypeError``/``ValueError`` for anything else."""
    out: dict[tuple[int, int], float] = {}
    for key, value in dict(links).items():
        src, dst = key
        src, dst, sent = int(src), int(dst), float(value)
        if src == dst:
            raise ValueError(f"rank {src} sends to itself")
        if sent:
            out[src, dst] = out.get((src, dst), 0.0) + sent
    return out


def public_link_bytes(link_bytes: Callable) -> CheckResult:
    name = "a8 (public): link_bytes returns {(src, dst): bytes}"
    try:
        seen = normalise_links(call(link_bytes, [8, 16, 4], ("col", "row"), 4, tp=2, dp=1,
                                    order="tp"))
    except (StudentError, TypeError, ValueError) as e:
        return CheckResult(name, 0, 1, str(e), expected="a dict {(src, dst): bytes}",
                           hint="return e.g. {(0, 1): 64, (1, 0): 64}")
    bad = [k for k in seen if not (0 <= k[0] < 2 and 0 <= k[1] < 2)]
    if bad:
        return CheckResult(name, 0, 1, "ranks out of range", seen=str(bad),
                           expected="ranks 0 .. tp * dp - 1", hint="tp=2, dp=1: ranks 0 and 1")
    example = {(0, 1): 64, (1, 0): 64}     # the notebook's worked example of Task 1
    if seen != example:
        return CheckResult(name, 0, 1, "not the worked example's bytes",
                           expected=f"link_bytes([8, 16, 4], ('col', 'row'), 4, tp=2) == {example}",
                           seen=str(seen), hint="the Task 1 text works this example out: the "
                           "second layer's (4, 4) output, 64 bytes, is all-reduced between the 2 "
                           "ranks, and each sends 2 * (1/2) * 64 bytes to the other", advisory=True)
    return CheckResult(name, 1, 1, f"returns {seen}, the worked example of Task 1 (the graded "
                       "tests try six other configurations)")


def public_choose_order(choose_order: Callable) -> CheckResult:
    name = "a8 (public): choose_order returns 'tp' or 'dp'"
    try:
        seen = call(choose_order, [8, 16, 4], ("col", "row"), 4, tp=2, dp=2, per_node=2)
    except StudentError as e:
        return CheckResult(name, 0, 1, str(e), expected="'tp' or 'dp'",
                           hint="the message names the line of your function that raised")
    if seen not in ORDERS:
        return CheckResult(name, 0, 1, "not an order", expected="'tp' or 'dp'", seen=repr(seen),
                           hint="return the string 'tp' or 'dp'")
    return CheckResult(name, 1, 1, f"returns {seen!r} for dims [8, 16, 4], ('col', 'row'), "
                       "batch 4, tp=2, dp=2, per_node=2 (whether it is right is graded)")
