"""Measured beside predicted, per layout: the collectives rank 0 started in one step
(counted and sized at the dispatcher, by the script's CommDebugMode subclass) and the
peak of its tensors (MemTracker) against the planner's rules for the capstone's own
functions, :func:`~grader.lab.planner.composed.step_collectives` and
:func:`~grader.lab.planner.composed.memory_terms`, for the same
:class:`~grader.lab.planner.composed.Layout` (not :mod:`~grader.lab.planner.sharded`'s
general model of ZeRO-3, which the scale page found wrong for these functions), every
difference with its size; the measured time of a step, and the
throughput: tokens per second, model FLOPs per token (FlopCounterMode's count of one
process's step, against the planner's :meth:`~grader.lab.planner.sharded.Transformer.
flops_per_token`) and the model FLOPs utilisation against a rate measured on this
machine.
"""
from __future__ import annotations

import statistics
from collections import Counter

from grader.lab.planner.composed import Layout, memory_terms, step_collectives
from grader.lab.planner.sharded import Transformer

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


def measured_sizes(run: dict) -> Counter:
    """Bytes per collective kind in the counted step: for each call, its largest
    tensor (an all-gather's output, a reduce-scatter's input), as the script sized it."""
    out: Counter = Counter()
    for name, size in run["collectives"]:
        out[OP.get(name, name)] += size
    return out


def predicted_ops(model: Transformer, layout: Layout) -> Counter:
    """Rank 0's collectives in a step, as the planner's rules for the capstone's
    functions list them (rank 0 is on the first pipeline stage)."""
    return Counter(op for op, _ in step_collectives(model, layout))


def count_gaps(rows: list[dict]) -> list[tuple[str, str, int, int]]:
    """(layout, op, measured, planned) for every collective whose count differs."""
    return [(r["layout"].text, op, r["measured"][op], r["predicted"][op])
            for r in rows for op in sorted(set(r["measured"]) | set(r["predicted"]))
            if r["measured"][op] != r["predicted"][op]]


def counts_words(rows: list[dict]) -> str:
    """What the page says of the counts: equal in every layout, or each difference
    with its size."""
    if not rows:
        return "no layout was measured"
    gaps = count_gaps(rows)
    if not gaps:
        return (f"rank 0's count of each collective equals the planner's in all "
                f"{len(rows)} layouts")
    return "they differ in " + "; ".join(
        f"{lay}: {op} {m} measured, {p} planned ({m - p:+d})" for lay, op, m, p in gaps)


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
                     "measured_bytes": sum(b for _, b in run["collectives"]),
                     "sizes": measured_sizes(run)})
    return rows


def _ops(c: Counter) -> str:
    return ", ".join(f"{n} {op}" for op, n in sorted(c.items())) or "none"


def _listed(label: str, items: list[str], width: int = 100) -> list[str]:
    """``label`` and ``items`` joined by commas, in lines of at most ``width`` characters,
    continued under the first item (the page's output lines fit its column)."""
    head = f"{'':9} {label:9}"
    lines, line = [], head
    for i, item in enumerate(items or ["none"]):
        piece = " " + item + ("," if i < len(items) - 1 else "")
        if line.strip() != label and len(line) + len(piece) > width:
            lines.append(line)
            line = " " * len(head)
        line += piece
    return lines + [line]


def layout_table(rows: list[dict]) -> str:
    lines = [f"{'layout':9} {'axes':26} {'step ms':>8}   collectives of rank 0 in a step"]
    for r in rows:
        lay = r["layout"]
        lines += [f"{lay.text:9} {str(lay):26} {1e3 * r['step_s']:8.0f}",
                  f"{'':9} measured: {_ops(r['measured'])}",
                  f"{'':9} planner:  {_ops(r['predicted'])}",
                  *_listed("sized:", [f"{op} {b / 1024:.0f} KiB"
                                      for op, b in sorted(r['sizes'].items())])]
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


# MemTracker's kinds, the planner's names for them and the page's
KINDS = (("Parameter", "params", "params"), ("Gradient", "grads", "grads"),
         ("Optstate", "optimizer", "momentum"), ("Activation", "activations", "activations"),
         ("Temp", "temporaries", "temporary"))


def memory_rows(record: dict) -> list[dict]:
    """Per layout MemTracker measured (not the pipelines: see the script): the peak of
    rank 0's tensors, with each kind's bytes at that moment, beside the planner's
    :func:`~grader.lab.planner.composed.memory_terms` for the same layout (each kind
    at its own largest in the step: their sum bounds a peak from above).
    ``gaps``: the planner's bytes less the measured, by the page's name of the kind."""
    model, out = model_of(record), []
    for run in record["runs"]:
        if run.get("control") or run.get("resumed") or not run.get("peak_bytes"):
            continue
        layout = Layout.parse(run["layout"], micro=record["sizes"]["micro"])
        measured, planned = run["peak_bytes"], memory_terms(model, layout)
        out.append({"layout": layout, "measured": measured, "planned": planned,
                    "error": sum(planned.values()) / measured["Total"] - 1,
                    "gaps": {name: planned[ours] - measured.get(theirs, 0)
                             for theirs, ours, name in KINDS}})
    return out


def memory_table(rows: list[dict]) -> str:
    kib = 1024
    lines = [f"{'layout':9} {'measured peak':>14} {'planner':>9} {'off by':>7}  (KiB)"]
    for r in rows:
        m, p = r["measured"], r["planned"]
        lines += [
            f"{r['layout'].text:9} {m['Total'] / kib:14.1f} {sum(p.values()) / kib:9.1f} "
            f"{r['error']:+7.0%}",
            f"{'':9} measured: " + ", ".join(
                f"{name} {m.get(theirs, 0) / kib:.0f}" for theirs, _, name in KINDS),
            f"{'':9} planner:  " + ", ".join(
                f"{name} {p[ours] / kib:.0f}" for _, ours, name in KINDS)]
    return "\n".join(lines)


def memory_words(rows: list[dict]) -> str:
    """Each kind's difference (planner less measured), as its range over the layouts
    in KiB, largest first: what the page says of the memory, on every build."""
    if not rows:
        return "no layout's memory was measured"
    kib, parts = 1024, []
    spans = {name: [r["gaps"][name] / kib for r in rows] for _, _, name in KINDS}
    for name, gaps in sorted(spans.items(), key=lambda kv: -max(map(abs, kv[1]))):
        lo, hi = min(gaps), max(gaps)
        parts.append(f"{name} {lo:+.1f} KiB" if f"{lo:+.1f}" == f"{hi:+.1f}" else
                     f"{name} {lo:+.1f} to {hi:+.1f} KiB")
    return "; ".join(parts)


def momentum_seen(rows: int = 1024) -> tuple[int, int]:
    """Bytes of optimizer state in MemTracker's peak of a step of a small model
    trained by SGD with momentum (the peak in the backward, where the activations
    are), when the optimizer is registered with ``track_external`` before its first
    step (as the capstone script does) and when registered after it, once the momentum
    exists. Measured, so that the page names this cause only where it is seen."""
    import contextlib

    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    out = []
    for late in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 64))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        tracker = MemTracker()
        if not late:
            tracker.track_external(model, opt)
        x = torch.randn(rows, 64)
        for step in range(2):
            if late and step == 1:
                tracker.track_external(model, opt)
            with tracker if step == 1 else contextlib.nullcontext():
                model(x).sum().backward()
                opt.step()
                opt.zero_grad()
        peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
        out.append(next(v for k, v in peak.items()
                        if getattr(k, "value", k) == "Optstate"))
    return out[0], out[1]


def momentum_words(rows: list[dict], seen: tuple[int, int]) -> str:
    """What the page says of the momentum in the measured peaks, from those peaks and
    :func:`momentum_seen`'s measurement (``seen``: registered before, after)."""
    if not rows:
        return "no layout's memory was measured"
    held = [r["measured"].get("Optstate", 0) for r in rows]
    before, after = seen
    if any(held):
        return (f"the tracker counted from {min(held) / 1024:.1f} to "
                f"{max(held) / 1024:.1f} KiB of it at the peak")
    words = (f"the tracker counted none of it at the peak in all {len(rows)} layouts, "
             "though SGD keeps its momentum from the first step on")
    if before == 0 and after > 0:
        words += (f". On this build, a small model's optimizer registered with "
                  f"MemTracker before its first step (as the script registers it) "
                  f"showed {before} bytes of state in the peak of a later step, "
                  f"registered after the first step {after:,} bytes: registered "
                  "before its momentum exists, the tracker does not count it at the "
                  "peak, so the measured peaks above leave it out")
    return words


def paddle_cost_table(record: dict) -> str:
    """Per layout of the Paddle script (not the resumed runs): the median step after
    the first, rank 0's collectives in its second step (from Paddle's log of its
    reshard functions), the bytes its process wrote in the third, and its shares of the
    weights, gradients and optimizer state."""
    kib, lines = 1024, []
    for run in (r for r in record["runs"] if not r["resumed"]):
        steps = sorted(run["step_s"][1:])
        tag = " (control)" if run["control"] else " (views)" if run.get("views") else ""
        lines.append(f"{run['layout']}{tag}: {1e3 * steps[len(steps) // 2]:.0f} ms per "
                     f"step, {run['wall_s']:.1f} s for the layout")
        comm, mem = run.get("collectives"), run.get("memory")
        if comm is None and mem is None:       # a record of an earlier script
            lines.append("    (no cost was recorded)")
            continue
        wrote = run.get("bytes_written")
        lines.append("    collectives: " + (_ops(Counter(comm["ops"])) if comm else
                                            "none (one rank)") +
                     (f"; wrote {wrote / kib:.0f} KiB in a step" if wrote is not None
                      else ""))
        if mem:
            lines.append(f"    rank 0's shares: params {mem['params'] / kib:.0f} KiB, "
                         f"grads {mem['grads'] / kib:.0f} KiB, optimizer "
                         f"{mem['optimizer'] / kib:.0f} KiB")
    return "\n".join(lines)


def paddle_comm_words(record: dict) -> str:
    """The check the page makes of Paddle's count where the collectives are known: a
    replicate-only layout all-reduces each parameter's gradient once; a layout with
    both axes, its gradients' all-reduces and as many more as a tensor-only layout's
    step ran (each number as recorded, the comparison computed)."""
    runs = {r["layout"]: r for r in record["runs"]
            if not r["resumed"] and not r["control"] and not r.get("views")
            and r.get("collectives") and (r.get("memory") or {}).get("tensors")}
    tp_only = next((lay for lay, r in runs.items() if r["replicate"] == 1
                    and r["tp"] > 1), None)
    words = []
    for lay, run in runs.items():
        n, tensors = run["collectives"]["ops"].get("all_reduce", 0), \
            run["memory"]["tensors"]
        if run["tp"] == 1:
            words.append(f"{lay} ran {n} all-reduces for its {tensors} parameter tensors"
                         + (", one per gradient" if n == tensors else ""))
        elif run["replicate"] > 1 and tp_only:
            a = runs[tp_only]["collectives"]["ops"].get("all_reduce", 0)
            words.append(f"{lay} ran {n}: {tensors} for the gradients and "
                         f"{n - tensors} more, {'as many as' if n - tensors == a else 'not'}"
                         f" the {a} of {tp_only}")
    return "; ".join(words) or "no layout's collectives were recorded"
