"""Chores of the chapter "Parallel computation on several devices"
(``chapters/multidevice.md``).

The experiments are framework code in the chapter's cells: GPU cells written as a
reader runs them on GPUs, and labelled CPU stand-in cells that run the same function in
CPU worker processes (:func:`grader.lab.standin_devices`). This module only says in
words what their figures show, each sentence chosen by the measured values (the load
line beside them is :func:`grader.lab.load_line`).
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["two_devices_verdict", "split_verdict"]


def two_devices_verdict(alone: Sequence[float], both: float) -> str:
    """``alone``: seconds each device took by itself; ``both``: seconds for all of them
    queued at once. Both at once can at best take as long as the slowest alone."""
    if not alone or both <= 0 or min(alone) <= 0:
        raise ValueError("need positive times for each device alone and for both")
    total, slowest = sum(alone), max(alone)
    speedup, ideal = total / both, total / slowest
    head = (f"one after the other {total:.3f} s, all at once {both:.3f} s: "
            f"{speedup:.2f}x as fast, against an ideal of {ideal:.2f}x "
            f"({100 * speedup / ideal:.0f}% of it)")
    if speedup >= 0.85 * ideal:
        return head + ". The devices worked at the same time."
    if speedup >= 1 + 0.25 * (ideal - 1):
        return head + (". They worked at the same time, but held each other back on "
                       "something they share.")
    return head + ". On this run they hardly worked at the same time."


def split_verdict(one: float, two: float, what: str = "two streams") -> str:
    """The same products run one at a time (``one`` s) or split over ``what`` (``two``
    s): the ratio, and a sentence chosen by it."""
    if one <= 0 or two <= 0:
        raise ValueError("need positive times")
    ratio = one / two
    if ratio >= 1.2:
        tail = f"{what} were faster: one at a time left part of the hardware idle"
    elif ratio > 1 / 1.2:
        tail = f"{what} gained nothing: one at a time already kept the hardware busy"
    else:
        tail = f"{what} were slower: they got in each other's way"
    return f"{ratio:.2f}x as fast with {what}; {tail}"
