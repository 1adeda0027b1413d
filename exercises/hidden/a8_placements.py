"""Hidden checks of assignment 8 (the public ones: ``grader.checks.a8_placements``)."""
from __future__ import annotations

from collections import Counter
from typing import Callable

from grader.checks.a8_placements import SCENARIOS, _as_strategy, _normalise
from grader.checks.result import CheckResult
from grader.checks.support import StudentError, call
from grader.lab import planner

__all__ = ["CONFIGS", "reference_communication", "check_predictions", "check_choices", "check_all"]

_PHASE = {"fwd": "fwd", "bwd": "bwd", "dp ": "dp"}

# (dims, placements, batch, tp, dp): each exercises one rule of the layout table
CONFIGS = [
    ([64, 256, 32], ("col", "row"), 16, 2, 1),         # Megatron's pair: one all-reduce forward
    ([64, 256, 32], ("col", "col"), 16, 2, 1),         # all-gathers forward, reduce-scatter back
    ([64, 256, 32], ("row", "col"), 16, 2, 1),         # partial sums forward and backward
    ([64, 256, 32], ("R", "R"), 16, 1, 2),             # plain data parallelism
    ([64, 128, 128, 32], ("col", "row", "col"), 16, 2, 1),
    ([64, 256, 32], ("col", "row"), 16, 2, 2),         # tensor- and data-parallel together
]


def reference_communication(dims, placements, batch, tp=2, dp=1) -> list[tuple[str, str, int]]:
    """The planner's collectives in the assignment's format."""
    return [(c.op, _PHASE[c.where[:3]], int(c.size))
            for c in planner.comm_plan(list(dims), tuple(placements), batch, tp, dp)]


def _describe(cfg) -> str:
    dims, pl, batch, tp, dp = cfg
    return f"dims {dims}, {list(pl)}, batch {batch}, tp={tp}, dp={dp}"


def check_predictions(predict_communication: Callable, points_each: float = 1.0) -> CheckResult:
    name = "a8: predicted collectives and their sizes"
    total = points_each * len(CONFIGS)
    got_points, problems = 0.0, []
    for cfg in CONFIGS:
        want = reference_communication(*cfg)
        try:
            seen = _normalise(call(predict_communication, list(cfg[0]), tuple(cfg[1]), cfg[2],
                                   tp=cfg[3], dp=cfg[4]))
        except StudentError as e:
            problems.append((_describe(cfg), "a list of (op, phase, size_bytes)", str(e),
                             "run predict_communication on this case in the notebook"))
            continue
        except (TypeError, ValueError) as e:
            problems.append((_describe(cfg), "a list of (op, phase, size_bytes) tuples",
                             f"not that shape ({e})", "return [(op, phase, size_bytes), ...]"))
            continue
        kinds_ok = Counter((o, p) for o, p, _ in seen) == Counter((o, p) for o, p, _ in want)
        sizes_ok = kinds_ok and Counter(seen) == Counter(want)
        got_points += points_each / 2 * kinds_ok + points_each / 2 * sizes_ok
        if not sizes_ok:
            hint = _hint(seen, want, cfg)
            problems.append((_describe(cfg), str(sorted(want)) or "[] (no communication)",
                             str(sorted(seen)) or "[]", hint))
    if not problems:
        return CheckResult(name, total, total, f"all {len(CONFIGS)} configurations predicted exactly")
    what, exp, seen, hint = problems[0]
    return CheckResult(name, round(got_points, 6), total,
                       f"{len(problems)} of {len(CONFIGS)} configurations mispredicted; first: {what}",
                       expected=exp, seen=seen, hint=hint,
                       details=tuple(f"also: {w}: expected {e}, seen {s}" for w, e, s, _ in problems[1:]))


def _hint(seen, want, cfg) -> str:
    dims, pl, batch, tp, dp = cfg
    if Counter((o, p) for o, p, _ in seen) == Counter((o, p) for o, p, _ in want):
        ratio = sorted(s for *_, s in seen), sorted(s for *_, s in want)
        if all(w == 4 * s for s, w in zip(*ratio)):
            return "sizes are in bytes: float32 elements take 4 bytes each"
        if all(w == tp * s for s, w in zip(*ratio)) or all(w == dp * s for s, w in zip(*ratio)):
            return "give the full tensor's size, not one rank's shard (and the batch per replica)"
        return ("activations are batch_per_replica x features x 4 bytes; the dp all-reduce "
                "carries one replica's gradients (sharded layers: 1/tp of the weight)")
    if not any(p == "bwd" for _, p, _ in seen) and any(p == "bwd" for _, p, _ in want):
        return "the backward pass communicates too: gradients flow back through the same layout table"
    if any(p == "dp" for _, p, _ in want) and not any(p == "dp" for _, p, _ in seen):
        return "with dp > 1 the replicas all-reduce their weight gradients once per step"
    return ("walk the layers: each placement needs an input layout (R, R, S for R, col, row) "
            "and gives an output (R, S, P); convert with S->R all-gather, P->R all-reduce, "
            "P->S reduce-scatter, R->S free; the loss needs R")


def check_choices(choose_strategy: Callable, points_each: float = 1.0) -> CheckResult:
    name = "a8: chosen strategies are the fastest the cost model predicts"
    total = points_each * len(SCENARIOS)
    got, problems = 0.0, []
    for label, dims, batch, cluster in SCENARIOS:
        best, preds = planner.best_strategy(dims, batch, cluster)
        try:
            strat = _as_strategy(call(choose_strategy, list(dims), batch, cluster))
        except StudentError as e:
            problems.append((label, str(best.strategy), str(e), "run choose_strategy in the notebook"))
            continue
        except (TypeError, ValueError) as e:
            problems.append((label, str(best.strategy), f"not (dp, tp, placements): {e}",
                             "return a tuple like (1, 2, ('col', 'row'))"))
            continue
        valid = {p.strategy: p for p in preds}
        if strat not in valid:
            problems.append((label, str(best.strategy), f"{strat}: not a valid strategy for 2 devices",
                             "dp * tp must be 2, the batch must split over dp, the split "
                             "features over tp"))
            continue
        mine = valid[strat]
        if mine.step_s <= best.step_s * (1 + 1e-9):
            got += points_each
        else:
            problems.append((label, f"{best.strategy}: {best.step_s * 1e3:.3f} ms per step",
                             f"{strat}: {mine.step_s * 1e3:.3f} ms (compute {mine.compute_s * 1e3:.3f}"
                             f" + communication {mine.comm_s * 1e3:.3f})",
                             "weigh the compute each device saves against the bytes the "
                             "split makes it send; small batches rarely pay for communication"))
    if not problems:
        return CheckResult(name, total, total, f"the fastest strategy in all {len(SCENARIOS)} scenarios")
    label, exp, seen, hint = problems[0]
    return CheckResult(name, got, total, f"{len(problems)} scenario(s) missed; first: {label}",
                       expected=exp, seen=seen, hint=hint,
                       details=tuple(f"also: {l}: expected {e}, seen {s}" for l, e, s, _ in problems[1:]))


def check_all(predict_communication: Callable, choose_strategy: Callable) -> list[CheckResult]:
    return [check_predictions(predict_communication), check_choices(choose_strategy)]
