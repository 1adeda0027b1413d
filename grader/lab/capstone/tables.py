"""Measured beside predicted, per layout: the collectives rank 0 started in one step
(counted and sized at the dispatcher, by the script's CommDebugMode subclass) against
the planner's :func:`~grader.lab.planner.sharded.step_collectives` for the same
:class:`~grader.lab.planner.composed.Layout`, the measured time of a step, and the
throughput: tokens per second, model FLOPs per token (FlopCounterMode's count of one
process's step, against the planner's :meth:`~grader.lab.planner.sharded.Transformer.
flops_per_token`) and the model FLOPs utilisation against a rate measured on this
machine.
"""
from __future__ import annotations

import statistics
from collections import Counter

from grader.lab.planner.cluster import PRESETS
from grader.lab.planner.composed import Layout, predict
from grader.lab.planner.sharded import Transformer, step_collectives

# the dispatcher's op names, as the planner names the collectives
OP = {"allgather_base": "all_gather", "all_gather_into_tensor": "all_gather",
      "allgather": "all_gather", "reduce_scatter_base": "reduce_scatter",
      "reduce_scatter_tensor": "reduce_scatter", "allreduce": "all_reduce",
      "all_reduce": "all_reduce", "send": "send", "recv": "recv"}


def model_of(record: dict) -> Transformer:
    s = record["sizes"]
    return Transformer(vocab=s["vocab"], width=s["width"], heads=s["heads"],
                       blocks=s["blocks"], seq=s["seq"], batch=s["batch"],
                       opt_states=s.get("opt_states", 0))


def measured_ops(run: dict) -> Counter:
    return Counter(OP.get(name, name) for name, _ in run["collectives"])


def predicted_ops(model: Transformer, layout: Layout) -> Counter:
    return Counter(op for op, *_ in step_collectives(model, layout.plan()))


def layout_rows(record: dict) -> list[dict]:
    """Per layout (not the control): its description, the median time of a step after
    the first, and the collectives of rank 0, measured and predicted."""
    model, rows = model_of(record), []
    for run in record["runs"]:
        if run.get("control") or run.get("resumed"):
            continue
        layout = Layout.parse(run["layout"], micro=record["sizes"]["micro"])
        # the first step builds caches; the last runs under MemTracker
        step_s = statistics.median(run["step_s"][1:-1])
        rows.append({"layout": layout, "step_s": step_s,
                     "tokens_s": model.batch * model.seq / step_s,
                     "flops": run.get("flops"),
                     "wall_s": run.get("wall_s"),
                     "measured": measured_ops(run), "predicted": predicted_ops(model, layout),
                     "measured_bytes": sum(b for _, b in run["collectives"])})
    return rows


def _ops(c: Counter) -> str:
    return ", ".join(f"{n} {op}" for op, n in sorted(c.items())) or "none"


def layout_table(rows: list[dict]) -> str:
    lines = [f"{'layout':9} {'axes':26} {'step ms':>8}   collectives of rank 0 in a step"]
    for r in rows:
        lay = r["layout"]
        lines += [f"{lay.text:9} {str(lay):26} {1e3 * r['step_s']:8.0f}",
                  f"{'':9} measured: {_ops(r['measured'])}",
                  f"{'':9} planner:  {_ops(r['predicted'])}"]
    return "\n".join(lines)


def flops_per_token(record: dict) -> tuple[float, float]:
    """(counted, planned): one process's step as FlopCounterMode counted it, per token;
    the planner's 6 x (parameters but the embedding) + 12 x seq x width x blocks."""
    model = model_of(record)
    return record["reference_flops"] / (model.batch * model.seq), model.flops_per_token()


def throughput_table(rows: list[dict], record: dict, rate: float, cores: int) -> str:
    """Per layout: tokens/s, and the model FLOPs utilisation: the model's FLOPs of a
    step over the step's time, against ``cores`` x ``rate`` (a core's measured
    matrix-product rate: what this machine's cores reach together)."""
    model = model_of(record)
    per_token = record["reference_flops"] / (model.batch * model.seq)
    lines = [f"{'layout':9} {'tokens/s':>9} {'GFLOP/s':>8} {'MFU':>6}"]
    for r in rows:
        achieved = per_token * r["tokens_s"]
        lines.append(f"{r['layout'].text:9} {r['tokens_s']:9.0f} {achieved / 1e9:8.3f} "
                     f"{achieved / (cores * rate):6.2%}")
    return "\n".join(lines)


def flops_words(records: list[dict]) -> str:
    """Whether each layout's per-rank counts of step 1 add up to one process's count."""
    off = [f"{r['layout']} ({sum(r['flops'])} against {rec['reference_flops']})"
           for rec in records for r in rec["runs"] if sum(r["flops"]) != rec["reference_flops"]]
    n = sum(len(rec["runs"]) for rec in records)
    return (f"add up, over the ranks, to exactly one process's count in all {n} runs"
            if not off else "do not add up to one process's count in " + ", ".join(off))


def memory_rows(record: dict) -> list[dict]:
    """Per layout MemTracker measured (not the pipelines: see the script): the peak of
    rank 0's tensors, by kind, beside the planner's memory terms for the same layout
    (the planner's compute rates play no part in them)."""
    model, out = model_of(record), []
    for run in record["runs"]:
        if run.get("control") or run.get("resumed") or not run.get("peak_bytes"):
            continue
        layout = Layout.parse(run["layout"], micro=record["sizes"]["micro"])
        planned = predict(model, layout, PRESETS["8 GPUs NVLink"]).memory_terms
        out.append({"layout": layout, "measured": run["peak_bytes"], "planned": planned,
                    "error": sum(planned.values()) / run["peak_bytes"]["Total"] - 1})
    return out


def memory_table(rows: list[dict]) -> str:
    kib = 1024
    lines = [f"{'layout':9} {'measured peak':>14} {'planner':>9} {'off by':>7}  (KiB)"]
    for r in rows:
        m, p = r["measured"], r["planned"]
        lines += [
            f"{r['layout'].text:9} {m['Total'] / kib:14.1f} {sum(p.values()) / kib:9.1f} "
            f"{r['error']:+7.0%}",
            f"{'':9} measured: params {m['Parameter'] / kib:.0f}, grads "
            f"{m['Gradient'] / kib:.0f}, momentum {m.get('Optstate', 0) / kib:.0f}, "
            f"activations {m['Activation'] / kib:.0f}, temporary {m['Temp'] / kib:.0f}",
            f"{'':9} planner:  params {p['params'] / kib:.0f}, grads "
            f"{p['grads'] / kib:.0f}, momentum {p.get('optimizer', 0) / kib:.0f}, "
            f"activations {p['activations'] / kib:.0f}"]
    return "\n".join(lines)
