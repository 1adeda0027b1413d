"""The runs of ``schedules_torch.py`` and ``schedules_paddle.py`` read back.

A run's JSON holds, per schedule and micro-batch count, every rank's passes of each
timed step as ``(kind, stage, micro-batch, start, end)`` (kind ``F`` forward, ``B``
backward, or only its input's gradient where a ``W`` pass computes the weights'
gradient later), and the bytes one micro-batch's forward saved per stage.

- :func:`replay`: a schedule's order run on a clock of given pass times, with free
  transfers: what the order costs on equal stages, or on the stages' measured times;
- :func:`rows`: per schedule, the bubble measured on each step's timeline, its formula,
  the order replayed on equal and on measured stage times, and the activations in
  flight per rank (micro-batches and bytes).
"""
from __future__ import annotations

import inspect
import statistics
from dataclasses import dataclass, field

from grader.lab import Timeline

from ..planner import schedules as S

__all__ = ["replay", "bubble_of", "in_flight", "timeline", "pass_times", "ScheduleRow",
           "rows", "COLORS"]

KINDS = {"F": "forward", "B": "backward", "W": "weight gradient"}
# the course's timeline colours, with a colour for each pass
COLORS = inspect.getmodule(Timeline).COLORS
COLORS.setdefault("forward", "#4C72B0")
COLORS.setdefault("backward", "#DD8452")
COLORS.setdefault("weight gradient", "#55A868")


def replay(orders: list[list[tuple]], times, stages: int) -> list[list[tuple]]:
    """Run each rank's passes ``(kind, stage, micro-batch)`` in its order, each as soon
    as the rank is free and its inputs are there (the forward of the stage before, the
    backward of the stage after, this stage's own forward; W after its B), each taking
    ``times(kind, stage)``. Returns the passes as ``(kind, stage, mb, start, end)``."""
    done: dict[tuple, float] = {}
    out: list[list[tuple]] = [[] for _ in orders]
    free, pos = [0.0] * len(orders), [0] * len(orders)
    while any(pos[r] < len(o) for r, o in enumerate(orders)):
        moved = False
        for r, order in enumerate(orders):
            if pos[r] == len(order):
                continue
            kind, s, i = order[pos[r]][:3]
            needs = {"F": [("F", s - 1, i)] if s > 0 else [],
                     "B": [("F", s, i)] + ([("B", s + 1, i)] if s < stages - 1 else []),
                     "W": [("B", s, i)]}[kind]
            if all(n in done for n in needs):
                start = max([free[r]] + [done[n] for n in needs])
                free[r] = done[(kind, s, i)] = start + times(kind, s)
                out[r].append((kind, s, i, start, free[r]))
                pos[r] += 1
                moved = True
        if not moved:
            raise ValueError("the passes wait on each other: not a valid schedule")
    return out


def timeline(ranks: list[list], title: str = "") -> Timeline:
    """One step's timeline: a row per rank, each pass labelled ``F<stage>.<mb>``."""
    tl = Timeline(title)
    for r, events in enumerate(ranks):
        for kind, s, i, start, end in events:
            tl.add(f"rank {r}", start, end, KINDS[kind], f"{kind}{s}.{i}")
    return tl


def bubble_of(ranks: list[list]) -> float:
    """The idle share of the ranks over the step's span (first start to last end)."""
    tl = timeline(ranks)
    span = tl.span()
    return statistics.mean(1 - tl.busy_time(row) / span for row in tl.rows)


def in_flight(events: list, saved: dict[int, float]) -> tuple[int, float]:
    """The most micro-batches one rank holds activations of at once, and their bytes:
    from a stage's forward of a micro-batch to the last pass that needs them (its W
    where the schedule splits the backward, else its B)."""
    last = {}
    for kind, s, i, *_ in events:
        if kind in "BW":
            last[(s, i)] = kind if kind == "W" or (s, i) not in last else last[(s, i)]
    held, count, most, most_bytes = set(), 0, 0, 0.0
    for kind, s, i, *_ in events:          # in the order the rank ran them
        if kind == "F":
            held.add((s, i))
        elif last.get((s, i)) == kind:
            held.discard((s, i))
        count = len(held)
        most = max(most, count)
        most_bytes = max(most_bytes, sum(saved[k[0]] for k in held))
    return most, most_bytes


def pass_times(steps: list[list[list]]) -> dict[tuple[str, int], float]:
    """The median seconds of each kind of pass on each stage, over every timed step."""
    seen: dict[tuple[str, int], list[float]] = {}
    for ranks in steps:
        for events in ranks:
            for kind, s, _, start, end in events:
                seen.setdefault((kind, s), []).append(end - start)
    return {k: statistics.median(v) for k, v in seen.items()}


@dataclass
class ScheduleRow:
    framework: str
    schedule: str
    micro: int
    ranks: int
    virtual: int
    bubbles: list[float]              # measured, one per timed step
    formula: float                    # equal stages, free transfers (planner.schedules)
    equal: float                      # the run's order replayed on equal stages
    unequal: float                    # ... on the stages' measured pass times
    in_flight: list[int]              # per rank: micro-batches held at most (per stage)
    in_flight_bytes: list[float]      # per rank: their saved activations, bytes
    weight_diff: float
    times: dict = field(repr=False, default_factory=dict)   # (kind, stage) -> seconds
    orders: list = field(repr=False, default_factory=list)  # per rank, the last step

    @property
    def bubble(self) -> float:
        return statistics.median(self.bubbles)

    def stage_times(self) -> dict[int, float]:
        """Seconds of one micro-batch's passes (F + B + W) on each stage."""
        out: dict[int, float] = {}
        for (kind, s), t in self.times.items():
            out[s] = out.get(s, 0.0) + t
        return dict(sorted(out.items()))


def rows(run: dict) -> list[ScheduleRow]:
    """Every schedule of one run, in the run's order."""
    out = []
    for everyone in run["runs"]:           # one entry per rank, same schedule
        first = everyone[0]
        p, v, m = len(everyone), first["virtual"], first["micro"]
        steps = list(zip(*(r["steps"] for r in everyone)))    # per step: every rank
        times = pass_times(steps)
        orders = [[tuple(e[:3]) for e in r["steps"][-1]] for r in everyone]
        kinds = {k for k, _ in times}
        # equal stages: every pass of a kind as long as its mean over the stages;
        # a split backward's B and W each as long as a forward (f = b = w)
        mean = {k: statistics.mean(t for (kk, _), t in times.items() if kk == k)
                for k in kinds}
        equal = (lambda k, s: 1.0) if "W" in kinds else (lambda k, s: mean[k])
        saved = {}
        for r in everyone:
            saved.update({int(s): b for s, b in r["saved_bytes"].items()})
        held = [in_flight(r["steps"][-1], saved) for r in everyone]
        out.append(ScheduleRow(
            run.get("framework", ""), first["schedule"], m, p, v,
            [bubble_of([list(map(tuple, e)) for e in ranks]) for ranks in steps],
            S.bubble(first["schedule"], p, m, v),
            bubble_of(replay(orders, equal, p * v)),
            bubble_of(replay(orders, lambda k, s: times[(k, s)], p * v)),
            [h[0] for h in held], [h[1] for h in held],
            max(r["weight_diff"] for r in everyone), times, orders))
    return out
