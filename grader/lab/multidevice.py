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


def _rate(flops: float, seconds: float) -> str:
    rate = flops / seconds
    return f"{rate / 1e12:.3g} TFLOP/s" if rate >= 1e11 else f"{rate / 1e9:.3g} GFLOP/s"


def two_devices_verdict(alone: Sequence[float], both: float) -> str:
    """``alone``: seconds each device took by itself; ``both``: seconds for all of them
    queued at once. Both at once can at best take as long as the slowest alone.

    The sentence says what the figures show and what they rule out; it names no cause the
    run did not measure (what the devices share, or other programs, would need a
    measurement of their own)."""
    if not alone or both <= 0 or min(alone) <= 0:
        raise ValueError("need positive times for each device alone and for both")
    total, slowest = sum(alone), max(alone)
    speedup, ideal = total / both, total / slowest
    head = (f"one after the other {total:.3f} s, all at once {both:.3f} s: "
            f"{speedup:.2f}x as fast, against an ideal of {ideal:.2f}x "
            f"({100 * speedup / ideal:.0f}% of it)")
    if speedup > 1.05 * ideal:
        return head + (". The devices worked at the same time; more than the ideal "
                       "means some runs alone were slowed more than the run of both "
                       "(compare the ranges).")
    if speedup >= 0.85 * ideal:
        return head + ". The devices worked at the same time."
    if speedup >= 1 + 0.25 * (ideal - 1):
        return head + (". They worked at the same time, but each went slower beside the "
                       "other than alone; this run does not say on what they waited.")
    return head + (". On this run both at once gained little or nothing over one after "
                   "the other: the work did not run side by side at full speed, and this "
                   "run does not say why (the load line below says whether other "
                   "programs held the cores).")


def split_verdict(one: float, two: float, what: str = "two streams",
                  ideal: float = 2.0, flops: float | None = None,
                  peak: float | None = None) -> str:
    """The same products run one at a time (``one`` s) or split over ``what`` (``two``
    s): the ratio, and a sentence chosen by it. Sharing the work between two queues can
    at best halve its time (``ideal``); more than that says one at a time lost time to
    something the split avoided.

    ``flops`` (the work's floating-point operations) adds the rate one at a time reached;
    with ``peak`` (the machine's peak FLOP/s, *measured* on the same page) too, the rate
    against the peak is the evidence that may name a cause: one at a time near the peak
    had nothing to gain, one far below it was held back by something other than its
    arithmetic. Without that evidence no cause is named."""
    if one <= 0 or two <= 0:
        raise ValueError("need positive times")
    ratio = one / two
    share = flops / one / peak if flops and peak else None
    rate = f" (one at a time ran at {_rate(flops, one)}" + (
        f", {100 * share:.2g}% of the measured peak)" if share is not None else ")") \
        if flops else ""
    if ratio > 1.2 * ideal:
        tail = (f"{what} were faster than sharing the work can explain (at most "
                f"{ideal:g}x): one at a time also lost time to something the split "
                "avoided")
    elif ratio >= 1.2:
        # what the split gained is measured; why, only where the rate against the peak is
        tail = f"{what} were faster"
        if share is not None and share < 0.6:
            tail += (": one at a time left much of the hardware idle, and the split filled "
                     "some of it")
        else:
            tail += ("; this run does not say why (the rate against the machine's "
                     "measured peak would tell how idle one at a time left it)")
    else:
        tail = (f"{what} gained little" if ratio >= 1.0 else
                f"{what} were no faster" if ratio > 1 / 1.2 else f"{what} were slower")
        if share is not None and share >= 0.6:
            tail += ": one at a time already kept the hardware busy"
        elif share is not None and share < 0.2:
            tail += (": one at a time left most of the hardware idle, yet a second queue "
                     "did not fill it, so what held each product back was not its "
                     "arithmetic")
        else:
            tail += ("; this run does not say why (the rate against the machine's "
                     "measured peak would tell whether one at a time already kept it "
                     "busy)")
    return f"{ratio:.2f}x as fast with {what}{rate}; {tail}"
