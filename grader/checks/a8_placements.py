"""Assignment 8: choose placements for the layers of an MLP and predict their communication.

The reference is the auto-parallel chapter's planner (:mod:`grader.lab.planner`): its
layout rules (``"R"`` replicated, ``"col"`` split by output features, ``"row"`` split by
input features; activations ``R``/``S``/``P``) and its cost model. The student writes

- ``predict_communication(dims, placements, batch, tp=2, dp=1)``: every collective of one
  training step as ``(op, phase, size_bytes)``, with ``op`` in ``all_reduce``,
  ``all_gather``, ``reduce_scatter``; ``phase`` in ``fwd``, ``bwd``, ``dp`` (the
  data-parallel gradient all-reduce); ``size_bytes`` the full (unsharded) float32 tensor.
  Graded on six configurations, half a point for the right collectives in the right
  phases, half for their sizes; the order of the list is not graded;
- ``choose_strategy(dims, batch, cluster) -> (dp, tp, placements)`` for 2 devices: graded on
  three scenarios against the planner's fastest prediction (ties accepted).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from ..lab import planner
from .result import CheckResult
from .support import StudentError, call

__all__ = ["CONFIGS", "SCENARIOS", "reference_communication", "check_predictions",
           "check_choices", "public_predict", "public_choose", "grade"]

# (dims, placements, batch, tp, dp): each exercises one rule of the layout table
CONFIGS = [
    ([64, 256, 32], ("col", "row"), 16, 2, 1),         # Megatron's pair: one all-reduce forward
    ([64, 256, 32], ("col", "col"), 16, 2, 1),         # all-gathers forward, reduce-scatter back
    ([64, 256, 32], ("row", "col"), 16, 2, 1),         # partial sums forward and backward
    ([64, 256, 32], ("R", "R"), 16, 1, 2),             # plain data parallelism
    ([64, 128, 128, 32], ("col", "row", "col"), 16, 2, 1),
    ([64, 256, 32], ("col", "row"), 16, 2, 2),         # tensor- and data-parallel together
]
MLP = [1024, 4096, 1024]
# The assignment's own two-device clusters (the figures the chapter's presets had when the
# assignment was written; the chapter's presets now follow datasheets, and they would
# change which answer is right): 50 TFLOP/s, 80 GiB, and a link of 150 GB/s and 10 us
# per ring step (NVLink) or 10 GB/s and 20 us (PCIe).
_NVLINK = planner.Cluster("2 GPUs NVLink", 2, flops=50e12, memory=80 * 2**30,
                          intra=planner.Link("NVLink", 150e9, 10e-6),
                          assumptions="the assignment's assumptions, not measured")
_PCIE = planner.Cluster("2 GPUs PCIe", 2, flops=50e12, memory=80 * 2**30,
                        intra=planner.Link("PCIe", 10e9, 20e-6),
                        assumptions="the assignment's assumptions, not measured")
SCENARIOS = [  # (label, dims, batch, cluster): a clear winner in each (>= 1.2x the runner-up)
    ("8 tokens over NVLink", MLP, 8, _NVLINK),
    ("1024 tokens over NVLink", MLP, 1024, _NVLINK),
    ("65536 tokens over PCIe", MLP, 65536, _PCIE),
]
_PHASE = {"fwd": "fwd", "bwd": "bwd", "dp ": "dp"}


def reference_communication(dims, placements, batch, tp=2, dp=1) -> list[tuple[str, str, int]]:
    """The planner's collectives in the assignment's format."""
    return [(c.op, _PHASE[c.where[:3]], int(c.size))
            for c in planner.comm_plan(list(dims), tuple(placements), batch, tp, dp)]


def _normalise(entries: Any) -> list[tuple[str, str, int]]:
    out = []
    for e in entries:
        op, phase, size = e
        out.append((str(op), str(phase), int(size)))
    return out


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


def _as_strategy(choice: Any) -> planner.Strategy:
    if isinstance(choice, planner.Strategy):
        return choice
    dp, tp, placements = choice
    return planner.Strategy(int(dp), int(tp), tuple(placements))


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


def public_predict(predict_communication: Callable) -> CheckResult:
    name = "a8 (public): predict_communication returns (op, phase, size_bytes) tuples"
    try:
        seen = _normalise(call(predict_communication, [8, 16, 4], ("col", "row"), 4, tp=2, dp=1))
    except (StudentError, TypeError, ValueError) as e:
        return CheckResult(name, 0, 1, str(e), expected="a list of (op, phase, size_bytes)",
                           hint="return e.g. [('all_reduce', 'fwd', 64)]")
    bad = [e for e in seen if e[0] not in ("all_reduce", "all_gather", "reduce_scatter")
           or e[1] not in ("fwd", "bwd", "dp")]
    if bad:
        return CheckResult(name, 0, 1, "unknown collective or phase", seen=str(bad),
                           expected="op in all_reduce/all_gather/reduce_scatter, phase in fwd/bwd/dp",
                           hint="spell them as in the table above")
    return CheckResult(name, 1, 1, f"returns {seen}")


def public_choose(choose_strategy: Callable) -> CheckResult:
    name = "a8 (public): choose_strategy returns (dp, tp, placements)"
    label, dims, batch, cluster = SCENARIOS[1]
    try:
        strat = _as_strategy(call(choose_strategy, list(dims), batch, cluster))
    except (StudentError, TypeError, ValueError) as e:
        return CheckResult(name, 0, 1, str(e), expected="(dp, tp, placements)",
                           hint="return e.g. (1, 2, ('col', 'row'))")
    return CheckResult(name, 1, 1, f"returns {strat} for {label}")


def grade(predict_communication: Callable, choose_strategy: Callable) -> list[CheckResult]:
    return [check_predictions(predict_communication), check_choices(choose_strategy)]
