"""Pipeline schedules beyond 1F1B, for the planner: the idle share of a step (the
bubble) and the micro-batches whose activations a rank holds at its peak, for GPipe,
1F1B, interleaved 1F1B and the zero-bubble schedules, with equal stages and free
transfers. The page "Pipeline schedules that shrink the bubble" sets them beside runs.

``p`` ranks, ``m`` micro-batches per step, ``v`` virtual stages per rank (a rank holds
``v`` stages of ``1/v`` of its layers each). Times per pass of a whole rank's layers:
``f`` forward, ``b`` backward of the input's gradient, ``w`` backward of the weights'
gradient (a plain backward is ``b + w``).

- GPipe and 1F1B idle ``(p-1)(f+b+w)`` per rank over ``m(f+b+w)`` of work:
  ``(p-1)/(m+p-1)`` (Huang et al. 2019; Narayanan et al. 2021).
- Interleaved 1F1B fills and drains the pipeline with passes ``v`` times shorter:
  ``(p-1)/(vm+p-1)`` (Narayanan et al. 2021).
- ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024) splits 1F1B's
  backward and fills the pipeline's gaps with the W passes: idle ``(p-1)(f+b-w)``,
  ``(p-1)/(3m+p-1)`` when ``f = b = w``; interleaved over ``v`` stages, ``v`` times
  less.
- ZB-V (the same paper's V-shaped schedule, PyTorch's ``ScheduleZBVZeroBubble``): two
  stages per rank, down the ranks and back up; what is left idle is the fill of the
  first forwards, as interleaved ZB's: ``(p-1)(f+b-w)/v``. (The paper's "zero" is the
  steady state's; PyTorch's order, replayed on equal stages, idles exactly this much.)

Activations in flight (a micro-batch counts from its forward to its last backward
pass, its W where there is one): GPipe holds all ``m``; 1F1B ``p - rank``; interleaved
1F1B Megatron's warm-up plus one, ``2(p - rank - 1) + (v-1)p + 1`` stage-micro-batches
of ``1/v`` each; PyTorch's zero-bubble schedules ``p`` on every rank (ZB-V's even
memory; for interleaved ZB, what PyTorch's order holds on 2 ranks); ZB-H1 as the
Paddle script orders it (a rank starts a forward while it holds fewer than
``2p - rank - 1``) reaches its bubble with that many: deferring W holds activations
longer.
"""
from __future__ import annotations

__all__ = ["SCHEDULES", "VIRTUAL", "bubble", "in_flight"]

# the schedules the page runs, and how many stages each puts on a rank by default
VIRTUAL = {"GPipe": 1, "1F1B": 1, "Interleaved 1F1B": 2, "ZB-H1": 1,
           "Interleaved zero bubble": 2, "ZBV zero bubble": 2}
SCHEDULES = tuple(VIRTUAL)


def bubble(schedule: str, p: int, m: int, v: int | None = None, f: float = 1.0,
           b: float = 1.0, w: float = 1.0) -> float:
    """The idle share of one step, equal stages, free transfers."""
    if schedule not in VIRTUAL:
        raise ValueError(f"unknown schedule {schedule!r}: use one of {SCHEDULES}")
    v = VIRTUAL[schedule] if v is None else v
    if p == 1:
        return 0.0
    work = m * (f + b + w)
    if schedule in ("GPipe", "1F1B"):
        idle = (p - 1) * (f + b + w)
    elif schedule == "Interleaved 1F1B":
        idle = (p - 1) * (f + b + w) / v
    else:                            # the zero-bubble schedules
        idle = (p - 1) * max(f + b - w, 0.0) / v
    return idle / (work + idle)


def in_flight(schedule: str, p: int, m: int, rank: int, v: int | None = None) -> float:
    """The most micro-batches whose activations rank ``rank`` holds at once (a forward
    ran, the last backward pass that needs them did not), in units of a whole rank's
    layers: with ``v`` virtual stages, one micro-batch on one stage counts ``1/v``."""
    if schedule not in VIRTUAL:
        raise ValueError(f"unknown schedule {schedule!r}: use one of {SCHEDULES}")
    v = VIRTUAL[schedule] if v is None else v
    if schedule == "GPipe":
        return float(m)
    if schedule == "1F1B":
        return float(min(m, p - rank))
    if schedule == "Interleaved 1F1B":
        # Megatron's warm-up: 2(p - rank - 1) + (v - 1)p forwards, then one more
        return min(m * v, 2 * (p - rank - 1) + (v - 1) * p + 1) / v
    if schedule == "ZB-H1":          # as schedules_paddle.py orders it
        return float(min(m, 2 * p - rank - 1))
    return float(min(m, p))          # PyTorch's zero-bubble schedules
