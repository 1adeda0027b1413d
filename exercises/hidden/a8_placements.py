"""Hidden checks of assignment 8 (the public ones: ``grader.checks.a8_placements``).

The reference is written here, from the layout rules the notebook states; it does not use
the chapter's planner (``grader.lab.planner``), which prices collectives but never says
which rank sends what to which rank, nor where the ranks sit. :func:`link_bytes` takes the
typical mistakes as switches, so a wrong answer's feedback can name the one it made.
"""
from __future__ import annotations

from typing import Callable

from grader.checks.a8_placements import ORDERS, normalise_links
from grader.checks.result import CheckResult
from grader.checks.support import StudentError, call

__all__ = ["step_collectives_tp_dp", "groups", "link_bytes", "cross_node_bytes", "best_order",
           "CONFIGS", "SCENARIOS", "MISTAKES", "check_links", "check_orders", "check_all"]

ITEMSIZE = 4
_NEEDED_IN = {"R": "R", "col": "R", "row": "S"}          # input layout each placement needs
_GIVEN_OUT = {"R": "R", "col": "S", "row": "P"}          # output layout it gives
_GRAD_GIVES = {"R": "R", "col": "P", "row": "S"}     # layout of the input gradient it gives
_GRAD_NEEDS = {"R": "R", "col": "S", "row": "R"}     # layout of the output gradient it needs
_COLLECTIVE = {("S", "R"): "all_gather", ("P", "R"): "all_reduce", ("P", "S"): "reduce_scatter"}

# the mistakes a wrong answer is compared with, and what its feedback then says
MISTAKES = {
    "forward_only": "no collective in the backward pass: the gradients flow back through "
                    "the same layout table (a col layer's input gradient is partial sums, P)",
    "unsharded_dp": "the dp all-reduce carries the gradient one rank holds: 1/tp of a "
                    "sharded layer's weight, not the whole weight",
    "global_batch": "an activation holds one replica's rows: batch / dp, not the whole batch",
    "elements": "sizes are bytes: 4 per float32 element",
    "whole_tensor": "in a ring each rank sends a share of the tensor: 2 (p - 1) / p of it for "
                    "an all-reduce, (p - 1) / p for an all-gather or a reduce-scatter",
    "backwards_ring": "in a ring each rank sends to the next rank of its group, the one after "
                      "it (the last sends to the first)",
    "other_order": "tp groups are consecutive ranks with order 'tp' (rank = d * tp + t), dp "
                   "groups with order 'dp' (rank = t * dp + d)",
}


def step_collectives_tp_dp(dims, placements, batch, tp=2, dp=1, mistakes=frozenset()):
    """``[(op, group_kind, size_bytes)]`` of one training step: ``group_kind`` is ``"tp"``
    (in every tp group) or ``"dp"`` (in every dp group)."""
    rows = batch if "global_batch" in mistakes else batch // dp
    itemsize = 1 if "elements" in mistakes else ITEMSIZE
    out = []
    if tp > 1:
        for k, pl in enumerate(placements):                       # forward
            need = _NEEDED_IN[placements[k + 1]] if k + 1 < len(placements) else "R"
            op = _COLLECTIVE.get((_GIVEN_OUT[pl], need))
            if op:
                out.append((op, "tp", rows * dims[k + 1] * itemsize))
        if "forward_only" not in mistakes:
            for k in reversed(range(len(placements))):            # backward
                have = "R" if k == len(placements) - 1 else _GRAD_GIVES[placements[k + 1]]
                op = _COLLECTIVE.get((have, _GRAD_NEEDS[placements[k]]))
                if op:
                    out.append((op, "tp", rows * dims[k + 1] * itemsize))
    if dp > 1:
        share = 1 if "unsharded_dp" in mistakes else tp
        held = sum(dims[k] * dims[k + 1] // (1 if pl == "R" else share)
                   for k, pl in enumerate(placements))
        out.append(("all_reduce", "dp", held * itemsize))
    return out


def groups(tp, dp, order="tp"):
    """``{"tp": [[ranks]...], "dp": [[ranks]...]}``, each group in ring order."""
    rank = (lambda d, t: d * tp + t) if order == "tp" else (lambda d, t: t * dp + d)
    return {"tp": [[rank(d, t) for t in range(tp)] for d in range(dp)],
            "dp": [[rank(d, t) for d in range(dp)] for t in range(tp)]}


def link_bytes(dims, placements, batch, tp=2, dp=1, order="tp", mistakes=frozenset()):
    """``{(src, dst): bytes}`` one training step sends over each link (ring collectives)."""
    if "other_order" in mistakes:
        order = "dp" if order == "tp" else "tp"
    out: dict[tuple[int, int], float] = {}
    by_kind = groups(tp, dp, order)
    for op, kind, size in step_collectives_tp_dp(dims, placements, batch, tp, dp, mistakes):
        for group in by_kind[kind]:
            p = len(group)
            if p < 2:
                continue
            share = 1 if "whole_tensor" in mistakes else (p - 1) / p
            sent = (2 if op == "all_reduce" else 1) * share * size
            for i, src in enumerate(group):
                dst = group[(i - 1) % p] if "backwards_ring" in mistakes else group[(i + 1) % p]
                out[src, dst] = out.get((src, dst), 0) + sent
    return out


def cross_node_bytes(links: dict, per_node: int) -> float:
    return sum(b for (src, dst), b in links.items() if src // per_node != dst // per_node)


def best_order(dims, placements, batch, tp, dp, per_node, mistakes=frozenset()) -> str:
    """The order that puts fewer bytes on the links between nodes (``"tp"`` on a tie)."""
    cross = {o: cross_node_bytes(link_bytes(dims, placements, batch, tp, dp, o, mistakes),
                                 per_node) for o in ORDERS}
    return "dp" if cross["dp"] < cross["tp"] else "tp"


# (dims, placements, batch, tp, dp, order): each exercises one part of the rules
CONFIGS = [
    ([64, 256, 32], ("col", "row"), 16, 2, 1, "tp"),          # Megatron's pair: one all-reduce
    ([64, 256, 32], ("R", "R"), 24, 1, 3, "tp"),              # plain data parallelism, a ring of 3
    ([64, 256, 32], ("col", "col"), 16, 2, 2, "tp"),          # all-gathers, a reduce-scatter back
    ([64, 128, 96, 32], ("col", "row", "col"), 16, 2, 2, "dp"),
    ([64, 256, 32], ("col", "row"), 16, 4, 2, "tp"),          # tp rings of 4, dp pairs
    ([64, 256, 32], ("row", "col"), 16, 2, 2, "dp"),          # partial sums both ways
]
MLP = [1024, 4096, 1024]
# (label, dims, placements, batch, tp, dp, per_node): which order keeps the heavy traffic
# inside the nodes; each is decided by a margin of at least 1.25x, and each typical mistake
# turns at least one of them around
SCENARIOS = [
    ("8 tokens, Megatron pair", MLP, ("col", "row"), 8, 2, 2, 2),
    ("12288 tokens, Megatron pair", MLP, ("col", "row"), 12288, 2, 2, 2),
    ("3072 tokens, two col layers", MLP, ("col", "col"), 3072, 2, 2, 2),
    ("2048 tokens on 2 nodes of 4, dp = 4", MLP, ("col", "row"), 2048, 2, 4, 4),
]


def _describe(cfg) -> str:
    dims, pl, batch, tp, dp, order = cfg
    return f"link_bytes({dims}, {tuple(pl)}, {batch}, tp={tp}, dp={dp}, order={order!r})"


def _show(links: dict) -> str:
    return "{" + ", ".join(f"({s}, {d}): {b:g}" for (s, d), b in sorted(links.items())) + "}" \
        if links else "{} (no communication)"


def _same(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(abs(a[k] - b[k]) <= 1e-6 * max(1.0, abs(b[k])) for k in b)


def diagnose(seen: dict, cfg) -> str:
    """The typical mistake ``seen`` matches (its hint), or a general hint."""
    dims, pl, batch, tp, dp, order = cfg
    for mistake, hint in MISTAKES.items():
        variant = link_bytes(dims, pl, batch, tp, dp, order, frozenset([mistake]))
        if _same(seen, variant) and not _same(variant, link_bytes(*cfg)):
            return hint
    return ("list the step's collectives (forward, backward, the dp all-reduce), their full "
            "sizes, the ring's share each rank sends, then which rank is next in each group")


def check_links(link_bytes_fn: Callable, points_each: float = 1.0) -> CheckResult:
    name = "a8: bytes each rank sends to each rank in one step"
    total = points_each * len(CONFIGS)
    got, problems = 0.0, []
    for cfg in CONFIGS:
        dims, pl, batch, tp, dp, order = cfg
        want = link_bytes(*cfg)
        try:
            seen = normalise_links(call(link_bytes_fn, list(dims), tuple(pl), batch, tp=tp, dp=dp,
                                        order=order))
        except StudentError as e:
            problems.append((_describe(cfg), _show(want), str(e), "run it on this case in the notebook"))
            continue
        except (TypeError, ValueError) as e:
            problems.append((_describe(cfg), _show(want), f"not a dict of (src, dst): bytes ({e})",
                             "return {(src, dst): bytes, ...}"))
            continue
        pairs_ok = set(seen) == set(want)
        bytes_ok = pairs_ok and _same(seen, want)
        got += points_each / 2 * pairs_ok + points_each / 2 * bytes_ok
        if not bytes_ok:
            problems.append((_describe(cfg), _show(want), _show(seen), diagnose(seen, cfg)))
    if not problems:
        return CheckResult(name, total, total, f"all {len(CONFIGS)} configurations exactly")
    what, exp, seen, hint = problems[0]
    return CheckResult(name, round(got, 6), total,
                       f"{len(problems)} of {len(CONFIGS)} configurations differ; first: {what}",
                       expected=exp, seen=seen, hint=hint,
                       details=tuple(f"also: {w}: expected {e}, seen {s}" for w, e, s, _ in problems[1:]))


def check_orders(choose_order: Callable, points_each: float = 1.0) -> CheckResult:
    name = "a8: the rank order that keeps the heavy traffic inside the nodes"
    total = points_each * len(SCENARIOS)
    got, problems = 0.0, []
    for label, dims, pl, batch, tp, dp, per_node in SCENARIOS:
        want = best_order(dims, pl, batch, tp, dp, per_node)
        cross = {o: cross_node_bytes(link_bytes(dims, pl, batch, tp, dp, o), per_node)
                 for o in ORDERS}
        try:
            seen = call(choose_order, list(dims), tuple(pl), batch, tp=tp, dp=dp, per_node=per_node)
        except StudentError as e:
            problems.append((label, want, str(e), "run choose_order on this scenario"))
            continue
        if seen == want:
            got += points_each
            continue
        hint = (f"count the bytes on links between nodes: order 'tp' puts {cross['tp']:.4g} "
                f"there, order 'dp' {cross['dp']:.4g}") if seen in ORDERS else \
            "return 'tp' or 'dp'"
        problems.append((label, repr(want), repr(seen), hint))
    if not problems:
        return CheckResult(name, total, total, f"the right order in all {len(SCENARIOS)} scenarios")
    label, exp, seen, hint = problems[0]
    return CheckResult(name, got, total, f"{len(problems)} of {len(SCENARIOS)} scenarios missed; "
                       f"first: {label}", expected=exp, seen=seen, hint=hint,
                       details=tuple(f"also: {l}: expected {e}, seen {s}" for l, e, s, _ in problems[1:]))


def check_all(link_bytes_fn: Callable, choose_order: Callable) -> list[CheckResult]:
    return [check_links(link_bytes_fn), check_orders(choose_order)]
