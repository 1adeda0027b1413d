"""Measured beside predicted, per layout: the collectives rank 0 started in one step
(counted and sized at the dispatcher, by the script's CommDebugMode subclass) against
the planner's :func:`~grader.lab.planner.sharded.step_collectives` for the same
:class:`~grader.lab.planner.composed.Layout`, and the measured time of a step.
"""
from __future__ import annotations

import statistics
from collections import Counter

from grader.lab.planner.composed import Layout
from grader.lab.planner.sharded import Transformer, step_collectives

# the dispatcher's op names, as the planner names the collectives
OP = {"allgather_base": "all_gather", "all_gather_into_tensor": "all_gather",
      "allgather": "all_gather", "reduce_scatter_base": "reduce_scatter",
      "reduce_scatter_tensor": "reduce_scatter", "allreduce": "all_reduce",
      "all_reduce": "all_reduce", "send": "send", "recv": "recv"}


def model_of(record: dict) -> Transformer:
    s = record["sizes"]
    return Transformer(vocab=s["vocab"], width=s["width"], heads=s["heads"],
                       blocks=s["blocks"], seq=s["seq"], batch=s["batch"], opt_states=0)


def measured_ops(run: dict) -> Counter:
    return Counter(OP.get(name, name) for name, _ in run["collectives"])


def predicted_ops(model: Transformer, layout: Layout) -> Counter:
    return Counter(op for op, *_ in step_collectives(model, layout.plan()))


def layout_rows(record: dict) -> list[dict]:
    """Per layout (not the control): its description, the median time of a step after
    the first, and the collectives of rank 0, measured and predicted."""
    model, rows = model_of(record), []
    for run in record["runs"]:
        if run.get("control"):
            continue
        layout = Layout.parse(run["layout"], micro=record["sizes"]["micro"])
        rows.append({"layout": layout, "step_s": statistics.median(run["step_s"][1:]),
                     "wall_s": run.get("wall_s"),
                     "measured": measured_ops(run), "predicted": predicted_ops(model, layout),
                     "measured_bytes": sum(b for _, b in run["collectives"])})
    return rows


def _ops(c: Counter) -> str:
    return ", ".join(f"{n} {op}" for op, n in sorted(c.items())) or "none"


def layout_table(rows: list[dict]) -> str:
    lines = [f"{'layout':9} {'axes':22} {'step ms':>8}  collectives of rank 0 in a step"]
    for r in rows:
        lay = r["layout"]
        lines.append(f"{lay.text:9} {str(lay):22} {1e3 * r['step_s']:8.0f}  measured: "
                     f"{_ops(r['measured'])}")
        lines.append(f"{'':42}planner:  {_ops(r['predicted'])}")
    return "\n".join(lines)
