"""Expert parallelism in the planner against the chapter's recorded mixture-of-experts
runs and the script's own layer."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from grader.lab.planner.experts import (MoE, all_to_all_time, buffer_bytes, capacity,
                                        dropped, dropped_even, exchange_sent, exchanges,
                                        expert_params, expert_params_per_rank)

ROOT = Path(__file__).parents[3]
RECORDED = Path(__file__).parents[1] / "context_expert" / "recorded"


@pytest.mark.parametrize("name", ["m4.json", "pm2.json"])
def test_capacity_buffers_exchanges_and_drops_equal_the_recorded(name):
    run = json.loads((RECORDED / name).read_text())
    for conf in run["runs"]:
        moe = MoE(run["experts"], run["top_k"], conf["capacity_factor"])
        cap = capacity(run["tokens_per_rank"], moe)
        assert cap == conf["capacity"]
        size = buffer_bytes(run["tokens_per_rank"], run["width"], moe)
        ex = exchanges(run["tokens_per_rank"], run["width"], moe, run["world"])
        for r in conf["ranks"]:
            assert [b for _, b in r["collectives"]] == [s for _, _, s, _ in ex] == [size] * 4
        hist = [r["sent"] for r in conf["ranks"]]
        kept = [sum(r["kept"][e] for r in conf["ranks"]) for e in range(run["experts"])]
        sent = [sum(h[e] for h in hist) for e in range(run["experts"])]
        assert dropped(hist, cap) == [s - k for s, k in zip(sent, kept)]


def test_expert_parameters_per_rank_are_the_script_s(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(ROOT / "chapters" / "scripts"))
    sys.modules.pop("moe_torch", None)
    import moe_torch

    router, experts = moe_torch.make_layer()
    moe = MoE(moe_torch.EXPERTS, moe_torch.TOP_K)
    width = moe_torch.WIDTH
    assert sum(p.numel() for p in experts[0].parameters()) == expert_params(moe, width)
    for world in (1, 2, 4):
        local = moe_torch.EXPERTS // world
        mine = sum(p.numel() for e in experts[:local] for p in e.parameters())
        assert expert_params_per_rank(moe, width, world) == mine + router.weight.numel()
    assert isinstance(router.weight, torch.Tensor)


def test_bytes_sent_per_exchange():
    assert exchange_sent("all_to_all", 4096, 4) == 3072       # all but its own share
    assert exchange_sent("all_gather", 4096, 4) == 3 * 4096   # every other buffer
    assert exchange_sent("all_to_all", 4096, 1) == 0
    assert all_to_all_time(4096, 4, bandwidth=1024, latency=1.0) == 3 + 3
    with pytest.raises(ValueError):
        exchange_sent("broadcast", 1, 2)


def test_an_even_router_drops_only_below_factor_one():
    tokens = 128
    for factor, want in ((0.5, 32 * 4 * 2), (1.0, 0), (1.5, 0)):
        assert dropped_even(tokens, MoE(4, 2, factor), ep=2) == want
    # the histogram's drops are per rank: 6 > 4 from rank 1 though 8 <= 2 x 4 overall
    assert dropped([[10, 2, 4, 0], [6, 6, 2, 2]], 4) == [8, 2, 0, 0]
    with pytest.raises(ValueError):
        dropped([[1, 2], [3]], 1)
    with pytest.raises(ValueError):
        expert_params_per_rank(MoE(4), 64, ep=3)
