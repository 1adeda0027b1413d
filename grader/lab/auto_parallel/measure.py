"""The planner against measurements: what the chapter's scripts measured, read back.

- :func:`fit_sweep`: the alpha-beta link fitted to a collective sweep
  (``sweep_<framework>.py``'s JSON);
- :func:`calibrate`: this machine's CPU ranks as a :class:`~.planner.Cluster`: that link,
  and the compute rate of the unsplit training steps ``mesh2d_<framework>.py`` timed on
  every rank next to each plan;
- :func:`compare`: each plan the script ran, predicted against measured (its fastest
  step, and the range of its steps), and its collectives as planned against those the
  framework ran;

Measured times are the fastest of their repeats: the chapter's machine is shared, and
other work on it only ever adds time; the range says how much.
- :func:`summary`: the figures the chapter's sentences are chosen by.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from grader.lab import planner as P

__all__ = ["load", "fit_sweep", "calibrate", "Row", "compare", "table", "Summary", "summary",
           "planned_collectives"]

PHASE = {"fwd": "forward", "bwd": "backward", "dp ": "optimizer step"}


def load(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run the launch command in the cell "
                                "above it first (its output says why it did not write it)")
    return json.loads(path.read_text())


def fit_sweep(sweep: dict) -> P.LinkFit:
    return P.fit_alpha_beta([(r["op"], r["ranks"], r["bytes"], r["s"]) for r in sweep["rows"]])


def _unsplit_flops(dims, batch: int) -> float:
    return P.compute_flops(dims, batch, P.Strategy(1, 1, ("R",) * (len(dims) - 1)))


def replicated_plan(runs: dict) -> str | None:
    """The plan that splits nothing over all ranks (``1xN:R,R,...``), if the run has it."""
    layers = len(runs["dims"]) - 1
    want = P.Strategy(1, runs["world"], ("R",) * layers).plan
    return want if any(r["plan"] == want for r in runs["plans"]) else None


def calibrate(sweep: dict, runs: dict, memory: float = 8 * 2**30
              ) -> tuple[P.Cluster, P.LinkFit]:
    """This machine's ranks from three measurements: the link fitted to the sweep; the
    compute rate of the fastest unsplit step (every rank ran one next to each step of
    each plan, all ranks at once, between the same barriers); and the framework's
    overhead per step, what the fastest step of the plan that splits nothing (same
    arithmetic, no communication) took beyond that. ``memory`` is a budget, not a
    measurement."""
    fit = fit_sweep(sweep)
    unsplit = min(t for run in runs["plans"] for t in run["unsplit_step_s"])
    rate = _unsplit_flops(runs["dims"], runs["batch"]) / unsplit
    overhead, plan = 0.0, replicated_plan(runs)
    if plan is not None:
        run = next(r for r in runs["plans"] if r["plan"] == plan)
        overhead = max(min(run["step_s"]) - unsplit, 0.0)
    cluster = P.calibrated_cluster(runs["world"], rate, fit.bandwidth, fit.latency, memory,
                                   overhead)
    return cluster, fit


def planned_collectives(dims, batch: int, strategy: P.Strategy,
                        dp_sync: str = "per_weight") -> dict[str, dict[str, int]]:
    """``{phase: {op: count}}`` of the planner's collectives, in the scripts' phases."""
    out: dict[str, Counter] = {p: Counter() for p in PHASE.values()}
    for c in P.comm_plan(dims, strategy.placements, batch, strategy.tp, strategy.dp,
                         dp_sync=dp_sync):
        out[PHASE[c.where[:3]]][c.op] += 1
    return {k: dict(v) for k, v in out.items()}


def _normalise(observed: dict) -> dict[str, dict[str, int]]:
    """CommDebugMode's names (``all_gather_into_tensor``) as the planner's."""
    rename = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor":
              "reduce_scatter", "all_to_all_single": "all_to_all"}
    return {phase: {rename.get(op, op): n for op, n in ops.items() if n}
            for phase, ops in observed.items()}


@dataclass
class Row:
    strategy: P.Strategy
    predicted: P.Prediction
    measured_s: float                 # the fastest of the timed steps
    low_s: float
    high_s: float
    planned: dict = field(default_factory=dict)
    observed: dict | None = None      # None: not counted for this run
    calibrates: bool = False          # its time went into the calibration
    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted.step_s - self.measured_s) / self.measured_s

    @property
    def as_planned(self) -> bool | None:
        if self.observed is None:
            return None
        return all(self.planned.get(p, {}) == self.observed.get(p, {})
                   for p in set(self.planned) | set(self.observed))


def compare(runs: dict, cluster: P.Cluster, observed: dict | None = None,
            dp_sync: str = "per_weight") -> list[Row]:
    """Every plan of a ``mesh2d_<framework>.py`` run, predicted and measured.
    ``observed``: ``{plan: {phase: {op: count}}}`` of the collectives the framework ran
    (the run's own counts when it has them, as PyTorch's CommDebugMode gives)."""
    rows, reference = [], replicated_plan(runs) if cluster.overhead else None
    for run in runs["plans"]:
        s = P.Strategy.parse(run["plan"])
        seen = run.get("collectives") or (observed or {}).get(run["plan"])
        rows.append(Row(s, P.predict(runs["dims"], runs["batch"], s, cluster,
                                     dp_sync=dp_sync),
                        min(run["step_s"]), min(run["step_s"]),
                        max(run["step_s"]),
                        planned_collectives(runs["dims"], runs["batch"], s, dp_sync),
                        _normalise(seen) if seen is not None else None,
                        calibrates=run["plan"] == reference))
    return rows


def table(rows: list[Row]) -> str:
    lines = [f"{'plan':<16} {'predicted ms':>12} {'fastest ms':>12} {'(range)':>13} "
             f"{'error':>7}  collectives as planned"]
    for r in rows:
        spread = f"{r.low_s * 1e3:.0f}-{r.high_s * 1e3:.0f}"
        planned = {None: "not counted", True: "yes"}.get(r.as_planned, "no")
        error = "(calib.)" if r.calibrates else f"{r.error:+7.0%}"
        lines.append(f"{r.strategy.plan:<16} {r.predicted.step_s * 1e3:12.2f} "
                     f"{r.measured_s * 1e3:12.2f} {spread:>13} {error:>7}  {planned}")
    return "\n".join(lines)


@dataclass
class Summary:
    median_abs_error: float
    worst_error: float                # the error of largest size, with its sign
    under: int                        # plans whose time the model underestimated
    spearman: float
    fastest_measured: str
    fastest_predicted: str
    place_of_predicted: int           # where the predicted fastest ranks when measured
    not_as_planned: list[str]


def summary(rows: list[Row]) -> Summary:
    """Over the plans that are predictions (not the one the calibration used)."""
    rows = [r for r in rows if not r.calibrates]
    errors = [r.error for r in rows]
    measured = sorted(rows, key=lambda r: r.measured_s)
    predicted = min(rows, key=lambda r: r.predicted.step_s)
    return Summary(
        median_abs_error=statistics.median(abs(e) for e in errors),
        worst_error=max(errors, key=abs),
        under=sum(e < 0 for e in errors),
        spearman=P.rank_correlation([r.predicted.step_s for r in rows],
                                    [r.measured_s for r in rows]),
        fastest_measured=measured[0].strategy.plan,
        fastest_predicted=predicted.strategy.plan,
        place_of_predicted=measured.index(predicted) + 1,
        not_as_planned=[r.strategy.plan for r in rows if r.as_planned is False])


def fit_sentence(framework: str, fit: P.LinkFit) -> str:
    """What the page says of the link fitted to ``framework``'s sweep, from the fit alone:
    how far the line misses the timed collectives, or, where the sweep did not grow with
    the size, that no bandwidth explains it (and so what the predictions below rest on)."""
    if not fit.ok:
        return (f"No bandwidth explains {framework}'s collectives in this build: "
                f"{fit.problem}. The predictions below price communication by that "
                "latency alone, so they say little about how plans that move many bytes "
                "compare.")
    err = fit.median_abs_error
    how = "well" if err < 0.15 else "roughly" if err < 0.4 else "poorly"
    return (f"One latency and one bandwidth explain {framework}'s collectives {how}: the "
            f"fitted lines miss the measured points by a median of {100 * err:.0f} %.")


def order_sentence(rho: float) -> str:
    """How the planner's order of the plans compares with the measured order, from
    Spearman's rank correlation ``rho`` (NaN when the measured steps left no order)."""
    if rho != rho:
        return ("cannot be compared with the measured order: the measured steps all took "
                "the same time, so they have none")
    if rho >= 0.8:
        words = "is close to the measured order"
    elif rho >= 0.4:
        words = "is roughly the measured order, with plans of close times swapped"
    elif rho >= 0:
        words = "keeps little of the measured order"
    else:
        words = "is closer to the reverse of the measured order"
    return f"{words} (Spearman's rank correlation {rho:.2f})"
