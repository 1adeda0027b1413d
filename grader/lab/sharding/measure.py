"""The sharding chapter's runs read back, and set beside the planner's predictions.

The scripts (``zero_<framework>.py``, ``pipeline_<framework>.py``) write JSON; this
module only reads it:

- :func:`memory_rows`: each strategy's memory on its busiest rank, measured and as the
  planner (:mod:`.planner.sharded`) predicts it, with the bytes it sent;
- :func:`calibrate`: this machine's ranks as a planner cluster, from the run itself: the
  link fitted to its few timed collectives, the compute rate of its one-process steps
  (all ranks computing at once), and the overhead of its plain data-parallel step;
- :func:`pipeline_rows`: each schedule and micro-batch count, its bubble measured on the
  stages' own timeline against ``(p-1)/(m+p-1)``, and its micro-batches in flight.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from grader.lab import planner as P
from grader.lab.auto_parallel.measure import load
from grader.lab.core.timeline import Timeline

__all__ = ["load", "MODEL", "plan_of", "sent_bytes", "MemoryRow", "memory_rows",
           "calibrate", "PipeRow", "pipeline_rows", "timeline", "KINDS"]

# the chapter's TinyGPT (tinygpt_torch.py, tinygpt_paddle.py): its sizes
MODEL = P.Transformer(vocab=128, width=64, heads=4, blocks=4, seq=32, batch=16)
KINDS = ("params", "grads", "optimizer", "activations")
# the names the frameworks give their collectives, as the planner's
OP_NAMES = {"allreduce": "all_reduce", "all_reduce": "all_reduce",
            "allgather_base": "all_gather", "all_gather": "all_gather",
            "reduce_scatter_base": "reduce_scatter", "reduce_scatter": "reduce_scatter",
            "broadcast": "broadcast", "reduce": "reduce_scatter"}


def plan_of(strategy: str, world: int) -> P.Plan:
    """The planner's name for a strategy the scripts ran on ``world`` ranks."""
    if strategy == "DP":
        return P.Plan(dp=world)
    if strategy.startswith("ZeRO-"):
        return P.Plan(dp=world, zero=int(strategy[-1]))
    if strategy == "2-D":
        return P.Plan(dp=world, zero=3, replicas=world // 2)
    raise ValueError(f"unknown strategy {strategy!r}")


def sent_bytes(collectives) -> float:
    """Bytes one rank sends in a step, from the logged (op, whole tensor bytes, ranks),
    priced as ring collectives (a reduce to one rank sends what a reduce-scatter does)."""
    return sum(P.ring_bytes(OP_NAMES[op], size, ranks) for op, size, ranks in collectives)


@dataclass
class MemoryRow:
    strategy: str
    world: int
    measured: dict[str, float]        # bytes on the busiest rank, by kind
    predicted: dict[str, float]
    sent: float                       # bytes one rank sent in the watched step
    predicted_sent: float
    weight_diff: float
    times: list[float]

    @property
    def total(self) -> float:
        return sum(self.measured.values())

    def error(self, kind: str | None = None) -> float:
        """(predicted - measured) / measured, of one kind or of the total."""
        pred = self.predicted[kind] if kind else sum(self.predicted.values())
        seen = self.measured[kind] if kind else self.total
        return (pred - seen) / seen


def memory_rows(run: dict, cluster: P.Cluster | None = None) -> list[MemoryRow]:
    """Every strategy of one ``zero_<framework>.py`` run."""
    world = run["world"]
    cluster = cluster or P.calibrated_cluster(world, 1e9, 1e9, 1e-5, 2**40)
    rows = []
    for r in run["runs"]:
        busiest = max(r["memory_per_rank"], key=lambda m: sum(m.values()))
        pred = P.predict_plan(MODEL, plan_of(r["strategy"], world),
                              P.with_devices(cluster, world))
        rows.append(MemoryRow(r["strategy"], world, {k: busiest[k] for k in KINDS},
                              dict(pred.memory_terms), sent_bytes(r["collectives"]),
                              pred.sent, r["weight_diff"], r["times"]))
    return rows


def calibrate(run: dict, memory: float = 2**40) -> tuple[P.Cluster, P.LinkFit]:
    """This machine's ranks, from one ``zero_torch.py`` run: the link fitted to its
    timed collectives; the compute rate of its one-process steps (every rank ran them
    at once, so a rank's share of the cores is in it); the overhead per step, what its
    data-parallel step took beyond the model's compute and communication. ``memory`` is
    a budget, not a measurement."""
    fit = P.fit_alpha_beta([(s["op"], s["ranks"], s["bytes"], s["s"])
                            for s in run["sweep"]])
    one = statistics.median(run["ref_times"])
    rate = MODEL.flops_per_token() * MODEL.batch * MODEL.seq / one
    world = run["world"]
    cluster = P.calibrated_cluster(world, rate, fit.bandwidth, fit.latency, memory)
    dp = next(r for r in run["runs"] if r["strategy"] == "DP")
    bare = P.predict_plan(MODEL, P.Plan(dp=world), cluster).step_s
    overhead = max(statistics.median(dp["times"]) - bare, 0.0)
    return P.calibrated_cluster(world, rate, fit.bandwidth, fit.latency, memory,
                                overhead), fit


def timeline(stages: list[list], title: str = "") -> Timeline:
    """One step's timeline: a row per stage, its forwards and backwards."""
    tl = Timeline(title)
    for s, events in enumerate(stages):
        for kind, mb, start, end in events:
            tl.add(f"stage {s}", start, end, "forward" if kind == "F" else "backward",
                   f"{kind}{mb}")
    return tl


def _bubble(stages: list[list]) -> float:
    """The idle share of the stages over the step's span (first start to last end)."""
    tl = timeline(stages)
    span = tl.span()
    return statistics.mean(1 - tl.busy_time(row) / span for row in tl.rows)


def _in_flight(events: list) -> int:
    """The most micro-batches whose forward ran and whose backward did not yet."""
    most = now = 0
    for kind, *_ in sorted(events, key=lambda e: e[2]):
        now += 1 if kind == "F" else -1
        most = max(most, now)
    return most


@dataclass
class PipeRow:
    schedule: str
    micro: int
    stages: int
    bubbles: list[float]              # one per timed step
    in_flight: list[int]              # per stage, in the last step
    times: list[float]                # the slowest stage's step times
    weight_diff: float
    busy: list[float] = field(default_factory=list)  # per stage: s of F and B, median step

    @property
    def imbalance(self) -> float:
        """The busiest stage's compute time over the least busy one's (1: equal stages,
        what the bubble's formula assumes)."""
        return max(self.busy) / min(self.busy) if self.busy and min(self.busy) > 0 \
            else float("nan")

    @property
    def bubble(self) -> float:
        return statistics.median(self.bubbles)

    @property
    def formula(self) -> float:
        return P.bubble_fraction(self.stages, self.micro)


def pipeline_rows(run: dict) -> list[PipeRow]:
    rows = []
    for everyone in run["runs"]:           # one entry per stage, same schedule
        first = everyone[0]
        steps = list(zip(*(r["steps"] for r in everyone)))   # per step: every stage
        rows.append(PipeRow(
            first["schedule"], first["micro"], len(everyone),
            [_bubble(list(stages)) for stages in steps],
            [_in_flight(r["steps"][-1]) for r in everyone],
            [max(ts) for ts in zip(*(r["times"] for r in everyone))],
            max(r["weight_diff"] for r in everyone),
            [statistics.median(sum(e[3] - e[2] for e in step) for step in r["steps"])
             for r in everyone]))
    return rows


def imbalance_sentence(rows: list[PipeRow]) -> str:
    """What the runs' own timelines say about the stages' work, for the page: how much
    longer the busiest stage computed than the other (measured), and what that does to
    the bubble's formula, which assumes equal stages."""
    ratios = [r.imbalance for r in rows if r.imbalance == r.imbalance]
    if not ratios:
        return "The runs recorded no stage's compute time, so their balance is unknown."
    lo, hi = min(ratios), max(ratios)
    span = f"{lo:.2f} times" if hi - lo < 0.05 else f"{lo:.2f} to {hi:.2f} times"
    if lo < 1.1:
        return (f"The stages computed for about as long as each other ({span} from the "
                "busier to the other, summed over a step): unequal work does not explain "
                "the difference from the formula here.")
    return (f"On the runs' own timelines the busier stage computed {span} as long as the "
            "other in a step: every exchange makes the faster stage wait for it, idle time "
            "the formula, which assumes equal stages, does not count, and which does not "
            "shrink with more micro-batches.")
