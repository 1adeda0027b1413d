"""Reading tp_torch.py's and tp_paddle.py's results back, setting the planner's
predictions beside them, and the words the page's sentences pick from the numbers."""
from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

from ..planner import Transformer, calibrated_cluster, fit_alpha_beta, ring_bytes
from ..planner.layers import (LayerPlan, activation_bytes, bytes_moved, collectives,
                              param_bytes, predict_layers)

# TinyGPT (chapters/scripts/tinygpt_*.py), as the planner describes it
MODEL = Transformer(vocab=128, width=64, heads=4, blocks=4, seq=32, batch=16)


def load(path) -> dict | None:
    """A run's JSON, or None where the run wrote none (a machine without Paddle)."""
    p = Path(path)
    return json.loads(p.read_text()) if p.exists() else None


def plan_of(run: dict) -> LayerPlan:
    how = run["how"]
    return LayerPlan(tp=run["tp"], sp="SP" in how, dp=run.get("dp", 1),
                     vocab_parallel=how not in ("by hand",))


def counted(run: dict) -> Counter:
    """{(phase, op, bytes, ranks): how many} of what the run's rank 0 started."""
    return Counter((phase, *map(_key, c)) for phase, calls in run["collectives"].items()
                   for c in calls)


def _key(v):
    return round(v) if isinstance(v, float) else v


def predicted(run: dict) -> Counter:
    return Counter(collectives(MODEL, plan_of(run)))


def sent(run: dict) -> float:
    """Bytes rank 0 sent in the watched step, by the ring algorithms, from what it ran."""
    return sum(n * ring_bytes(op, size, p) for (_, op, size, p), n in counted(run).items())


def label(run: dict) -> str:
    shape = f"tp {run['tp']}" if run.get("dp", 1) == 1 else f"{run['dp']} x {run['tp']}"
    return f"{run['how']}, {shape}"


def collective_lines(run: dict) -> list[str]:
    """One line per phase: how many of each collective, of which size, over how many."""
    lines = []
    by_phase: dict[str, Counter] = {}
    for (phase, op, size, p), n in counted(run).items():
        by_phase.setdefault(phase, Counter())[(op, size, p)] += n
    for phase in ("forward", "backward", "optimizer"):
        calls = by_phase.get(phase)
        text = ", ".join(f"{n} {op} of {_kib(size)} over {p}"
                         for (op, size, p), n in sorted(calls.items())) if calls else "none"
        lines.append(f"{phase:>9}: {text}")
    return lines


def _kib(n: float) -> str:
    return f"{n / 1024:g} KiB"


def agreement(runs: list[dict]) -> dict:
    """The largest differences from one process over `runs`, and the least that
    training moved the weights."""
    return {"logits": max(r["logits_diff"] for r in runs),
            "grads": max(r["grad_diff"] for r in runs),
            "weights": max(r["weight_diff"] for r in runs),
            "moved": min(r["moved"] for r in runs), "n": len(runs)}


def agreement_words(agree: dict, tolerance: float = 1e-4) -> str:
    """Whether every run ends where one process does, in words."""
    if agree["weights"] <= tolerance and agree["moved"] > 100 * agree["weights"]:
        return (f"equal to one process within {tolerance:.0e}: the largest difference "
                f"of a weight is {agree['weights']:.1e}, where training moved the "
                f"weights by at least {agree['moved']:.1e} (float32 rounding: the ranks "
                "add partial sums in another order than one process does)")
    return (f"not equal to one process within {tolerance:.0e}: a weight differs by "
            f"{agree['weights']:.1e} (training moved them by {agree['moved']:.1e})")


def calibrate(result: dict):
    """A cluster for this machine from the run itself: the compute rate of the
    one-process steps every rank ran beside its split ones, the link fitted to the bare
    collectives it timed, no overhead per step."""
    steps = [t for r in result["runs"] for t in r["ref_step_s"]]
    flops = MODEL.flops_per_token() * MODEL.seq * MODEL.batch / statistics.median(steps)
    fit = fit_alpha_beta([(s["op"], s["ranks"], s["bytes"], s["s"])
                          for s in result["sweep"]])
    return calibrated_cluster(result["world"], flops, fit.bandwidth, fit.latency,
                              memory=2**40)


def prediction_rows(runs: list[dict], cluster) -> list[dict]:
    """Each run's measured parameters, activations, bytes sent and step time beside the
    planner's, with the relative error of each."""
    rows = []
    for r in runs:
        pred = predict_layers(MODEL, plan_of(r), cluster)
        measured = {"params": r["params"], "activations": r["activations"],
                    "sent": sent(r), "step_s": statistics.median(r["step_s"])}
        guess = {"params": pred.params, "activations": pred.activations,
                 "sent": pred.sent, "step_s": pred.step_s}
        rows.append({"run": label(r), "measured": measured,
                     "predicted": guess,
                     "error": {k: (guess[k] - v) / v if v else 0.0
                               for k, v in measured.items()},
                     "same_collectives": counted(r) == predicted(r)})
    return rows


def memory_line(run: dict) -> str:
    """A run's parameters, activations and bytes sent per rank beside the planner's (for
    a run that timed nothing: the Paddle script's)."""
    plan = plan_of(run)
    pairs = {"parameters": (run["params"], param_bytes(MODEL, plan)),
             "activations": (run["activations"], activation_bytes(MODEL, plan)),
             "sent": (sent(run), bytes_moved(MODEL, plan))}
    return f"{label(run)}:\n  " + "\n  ".join(
        f"{k} {m / 1024:.0f} KiB (planner {p / 1024:.0f}, {100 * (p - m) / m:+.1f} %)"
        for k, (m, p) in pairs.items())


def prediction_table(rows: list[dict]) -> str:
    head = (f"{'run':<24}{'params KiB':>18}{'activations KiB':>20}{'sent KiB':>18}"
            f"{'ms/step':>16}")
    lines = [head, f"{'':<24}" + "".join(f"{'meas. / pred.':>{w}}" for w in (18, 20, 18, 16))]
    for row in rows:
        m, p = row["measured"], row["predicted"]
        cells = [f"{m[k] / 1024:.0f} / {p[k] / 1024:.0f}"
                 for k in ("params", "activations", "sent")]
        cells.append(f"{m['step_s'] * 1e3:.0f} / {p['step_s'] * 1e3:.0f}")
        lines.append(f"{row['run']:<24}" + "".join(
            f"{c:>{w}}" for c, w in zip(cells, (18, 20, 18, 16))))
    return "\n".join(lines)


def error_words(errors: list[float]) -> str:
    """How far predictions fell from measurements, in words."""
    if not errors:
        return "not compared (no run to compare with)"
    worst = max(errors, key=abs)
    if abs(worst) < 0.005:
        return "exactly (within 0.5 %)"
    if abs(worst) < 0.05:
        return f"within {100 * abs(worst):.0f} %"
    med = statistics.median(abs(e) for e in errors)
    way = "below" if worst < 0 else "above"
    return (f"off by a median of {100 * med:.0f} %, and by {100 * abs(worst):.0f} % at "
            f"worst (the prediction {way} the measurement)")


def time_words(errors: list[float]) -> str:
    """The sentence on predicted step times: how far off, and, where the model misses
    by more than a quarter, what it leaves out (not which of it: nothing here measured
    that)."""
    words = f"The step times are predicted {error_words(errors)}."
    if errors and statistics.median(abs(e) for e in errors) > 0.25:
        words += (" The model prices the collectives as bare ones on an otherwise idle "
                  "link and counts nothing for what the framework does around every "
                  "operator (DTensor places, redistributes and checks placements) or "
                  "for ranks sharing cores; the page has not measured those apart, so "
                  "it does not say which of them the difference is.")
    return words


def falls_words(values: list[float]) -> str:
    """Whether values (by growing degree) fall, in words (for a plural subject)."""
    pairs = list(zip(values, values[1:]))
    if all(b < a for a, b in pairs):
        return "fall at every step"
    if all(b <= a for a, b in pairs):
        return "never grow"
    return "do not fall at every step"


# CommDebugMode's names for the collectives the script's own log calls by one name
COMM_DEBUG_NAMES = {"all_reduce": ("all_reduce", "allreduce_"),
                    "all_gather": ("all_gather_into_tensor", "_allgather_base_"),
                    "reduce_scatter": ("reduce_scatter_tensor", "_reduce_scatter_base_")}


def comm_debug_agrees(run: dict) -> bool:
    """Whether CommDebugMode counted, per phase and kind, what the script's log did."""
    for phase in ("forward", "backward"):
        for op, names in COMM_DEBUG_NAMES.items():
            theirs = sum(n for k, n in run["comm_debug"][phase].items() if k in names)
            if theirs != sum(c[0] == op for c in run["collectives"][phase]):
                return False
    return True
