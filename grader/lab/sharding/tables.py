"""The sharding chapter's tables, as text: the collectives each strategy ran, the
planner's predictions beside the measurements, the pipelines' bubbles, and the plans the
planner weighs for a model on a cluster."""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict

from grader.lab import planner as P
from .measure import KINDS, OP_NAMES, MemoryRow, PipeRow

__all__ = ["collectives_table", "prediction_table", "pipeline_table", "plans_table",
           "mib"]


def mib(x: float) -> str:
    return f"{x / 2**20:.3f}"


def collectives_table(run: dict) -> str:
    """Per strategy: each kind of collective, how many, the sizes of their whole tensors
    and the group size; then the bytes one rank sent (ring)."""
    lines = [f"{'':8} {'collective':<16} {'calls':>5}  {'tensor sizes (KiB)':<28} "
             f"{'ranks':>5}"]
    for r in run["runs"]:
        by_op: dict[tuple[str, int], list[int]] = defaultdict(list)
        for op, size, ranks in r["collectives"]:
            by_op[(OP_NAMES[op], ranks)].append(size)
        first = True
        for (op, ranks), sizes in sorted(by_op.items()):
            kib = Counter(round(s / 1024, 1) for s in sizes)
            shown = ", ".join(f"{n} x {k:g}" if n > 1 else f"{k:g}"
                              for k, n in sorted(kib.items(), reverse=True))
            lines.append(f"{r['strategy'] if first else '':8} {op:<16} {len(sizes):>5}  "
                         f"{shown:<28} {ranks:>5}")
            first = False
        if first:
            lines.append(f"{r['strategy']:8} (none recorded: the framework's C++ ran them)")
    return "\n".join(lines)


def prediction_table(rows: list[MemoryRow], prediction_s: dict[str, float]) -> str:
    """Predicted against measured: step time (median of the timed steps, with their
    range), bytes one rank sent, memory of the busiest rank."""
    # at most 100 characters a line (an output box cuts what is longer)
    lines = [f"{'':8} {'ms/step pred.':>13} {'measured (range)':>17} {'error':>6}  "
             f"{'sent pred.':>10} {'meas.':>6}  {'held pred.':>10} {'meas.':>6} "
             f"{'error':>7}"]
    for r in rows:
        med = statistics.median(r.times)
        pred = prediction_s[r.strategy]
        spread = f"{med * 1e3:.0f} ({min(r.times) * 1e3:.0f}-{max(r.times) * 1e3:.0f})"
        err = "calib." if r.strategy == "DP" else f"{(pred - med) / med:+.0%}"
        lines.append(f"{r.strategy:8} {pred * 1e3:13.0f} {spread:>17} {err:>6}  "
                     f"{mib(r.predicted_sent):>10} {mib(r.sent):>6}  "
                     f"{mib(sum(r.predicted.values())):>10} {mib(r.total):>6} "
                     f"{r.error():+7.1%}")
    lines.append("sent: MiB one rank sent per step; held: MiB of the busiest rank")
    return "\n".join(lines)


def pipeline_table(rows_by_framework: dict[str, list[PipeRow]]) -> str:
    lines = [f"{'':8} {'schedule':<6} {'m':>2}  {'idle share: measured (range)':<29} "
             f"{'formula':>7}  {'in flight per stage':<20} {'weights vs whole':>16}"]
    for fw, rows in rows_by_framework.items():
        for r in rows:
            meas = f"{r.bubble:.0%} ({min(r.bubbles):.0%}-{max(r.bubbles):.0%})"
            lines.append(f"{fw:8} {r.schedule:<6} {r.micro:>2}  {meas:<29} "
                         f"{r.formula:7.0%}  {str(r.in_flight):<20} "
                         f"{r.weight_diff:16.1e}")
    return "\n".join(lines)


def plans_table(preds: list[P.PlanPrediction], limit: int = 8, unit: str = "GiB") -> str:
    """The plans that fit, fastest first (up to ``limit``), then how many did not."""
    scale = {"MiB": 2**20, "GiB": 2**30}[unit]
    fit = [p for p in preds if p.fits]
    lines = [f"{'plan':<46} {'ms/step':>9} {unit + '/rank':>9} {'sent/rank':>10}"]
    for p in fit[:limit]:
        lines.append(f"{str(p.plan):<46} {p.step_s * 1e3:9.2f} {p.memory / scale:9.2f} "
                     f"{P.fmt_bytes(p.sent):>10}")
    if len(fit) > limit:
        lines.append(f"... and {len(fit) - limit} more that fit")
    refused = [p for p in preds if not p.fits]
    if refused:
        least = min(refused, key=lambda p: p.memory)
        lines.append(f"refused: {len(refused)} plans that do not fit (the smallest of "
                     f"them, {least.plan}, needs {least.memory / scale:.2f} {unit} per "
                     "rank)")
    return "\n".join(lines)


def kinds_line(memory: dict) -> str:
    return ", ".join(f"{k} {mib(memory[k])}" for k in KINDS)
