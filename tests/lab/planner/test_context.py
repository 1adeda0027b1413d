"""Context parallelism in the planner: ring attention's work, bytes and memory per rank,
against the counts the chapter's ring scripts recorded."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.lab.planner.context import (RingAttention, causal_imbalance, chunks_of,
                                        predict_ring, ring_memory, ring_pairs,
                                        ring_traffic, step_blocks)

RECORDED = Path(__file__).parents[1] / "context_expert" / "recorded"


def _run(name):
    return json.loads((RECORDED / name).read_text())


@pytest.mark.parametrize("name", ["r4.json", "pr4.json", "r2_sent.json"])
def test_pairs_and_chunks_equal_what_each_rank_recorded(name):
    run = _run(name)
    for conf in run["runs"]:
        pairs = ring_pairs(run["world"], conf["layout"], conf["causal"])
        for r in conf["ranks"]:
            assert pairs[r["rank"]] == r["pairs"]
            assert chunks_of(r["rank"], run["world"], conf["layout"]) == r["chunks"]


def test_bytes_sent_equal_what_the_isends_recorded():
    run = _run("r2_sent.json")
    attn = RingAttention(run["seq"], run["heads"], run["head_dim"])
    sent = ring_traffic(attn, run["world"]).sent
    assert [r["sent_bytes"] for c in run["runs"] for r in c["ranks"]] == [sent] * 6


@pytest.mark.parametrize("cp", [1, 2, 3, 4, 8])
def test_the_page_s_formulas_hold_for_any_ring(cp):
    assert ring_pairs(cp, "contiguous", causal=False) == [4 * cp] * cp
    assert ring_pairs(cp, "contiguous") == [4 * r + 3 for r in range(cp)]
    assert ring_pairs(cp, "zigzag") == [2 * cp + 1] * cp
    assert sum(ring_pairs(cp, "contiguous")) == sum(ring_pairs(cp, "zigzag"))
    assert causal_imbalance(cp, "zigzag") == 1.0
    assert causal_imbalance(cp, "contiguous") == pytest.approx((4 * cp - 1) / (2 * cp + 1))


def test_cp_minus_one_blocks_each_way_and_memory_split():
    attn = RingAttention(seq=1024, heads=4, head_dim=16)
    t = ring_traffic(attn, 4)
    assert (t.steps, t.block) == (3, 2 * 4 * 256 * 16 * 4)
    assert t.sent == t.received == 3 * t.block
    assert ring_traffic(attn, 1).sent == 0
    assert step_blocks(4) == 9 and step_blocks(1) == 0
    whole, ring = ring_memory(attn, 1), ring_memory(attn, 4)
    assert whole["scores"] == 4 * 1024 * 1024 * 4            # seq x seq per head
    assert ring["scores"] == 4 * 128 * 128 * 4                # one chunk pair
    assert ring["queries"] * 4 == whole["queries"]
    assert predict_ring(attn, 4, "contiguous").imbalance == pytest.approx(15 / 9)


def test_sizes_that_do_not_cut_are_refused():
    with pytest.raises(ValueError, match="2 x cp"):
        RingAttention(seq=1000, heads=4, head_dim=16).block_bytes(16)
    with pytest.raises(ValueError, match="layout"):
        ring_pairs(2, "striped")
