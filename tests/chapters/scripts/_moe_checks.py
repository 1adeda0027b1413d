"""What every mixture-of-experts run must show, whichever framework ran it. The routing
is recomputed here, in one process, from the script's own layer and input."""
from __future__ import annotations

import math
import sys

from grader.lab.planner.experts import MoE, buffer_bytes, capacity as planned
from grader.lab.planner.experts import dropped as planned_drops

from ._launch import SCRIPTS

TOLERANCE = 1e-4      # the page's: float32 sums over 512 tokens, in another order


def script_module(name: str):
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return __import__(name)


def check_moe_run(run: dict, top_experts: list[list[int]]) -> None:
    """``top_experts``: for every token (all ranks' in order), its TOP_K experts, as
    computed in one process."""
    world, experts, k = run["world"], run["experts"], run["top_k"]
    per_rank = run["tokens_per_rank"]
    assert len(top_experts) == world * per_rank
    sent_by_rank = []
    for r in range(world):
        counts = [0] * experts
        for choices in top_experts[r * per_rank:(r + 1) * per_rank]:
            for e in choices:
                counts[e] += 1
        sent_by_rank.append(counts)
    assert len(run["runs"]) >= 2
    for conf in run["runs"]:
        capacity = conf["capacity"]
        assert capacity == math.ceil(conf["capacity_factor"] * per_rank * k / experts)
        ranks = sorted(conf["ranks"], key=lambda r: r["rank"])
        for r, stats in enumerate(ranks):
            # the script routed every token as the one-process computation does
            assert stats["sent"] == sent_by_rank[r]
            # an expert keeps at most `capacity` from each rank: drops follow the rule
            assert stats["kept"] == [min(n, capacity) for n in sent_by_rank[r]]
            for key in ("out_diff", "x_grad_diff", "expert_grad_diff",
                        "router_grad_diff"):
                assert stats[key] <= TOLERANCE, (conf["capacity_factor"], key, stats)
            # two exchanges forward, two backward, each all of the rank's slots
            size = experts * capacity * run["width"] * 4
            assert [c[1] for c in stats["collectives"]] == [size] * 4
        # the planner's counts: capacity, buffer, and drops from the histogram
        moe = MoE(experts, k, conf["capacity_factor"])
        assert planned(per_rank, moe) == capacity
        assert buffer_bytes(per_rank, run["width"], moe) == size
        kept = [sum(r["kept"][e] for r in ranks) for e in range(experts)]
        assert planned_drops(sent_by_rank, capacity) == [
            sum(row[e] for row in sent_by_rank) - kept[e] for e in range(experts)]
    dropped = [sum(max(0, row[e] - c["capacity"]) for row in sent_by_rank)
               for c in run["runs"] for e in range(experts)]
    assert any(dropped) and not all(dropped)   # the factors tried drop some, not all
