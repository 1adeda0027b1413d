"""The search over dp, tp, sp, cp and ep: each term is the module's count, plans that
do not fit are refused with their reason, shapes that do not split are not tried."""
from __future__ import annotations

from dataclasses import replace

import pytest

from grader.lab.planner import PRESETS, Transformer
from grader.lab.planner.context import RingAttention, step_blocks
from grader.lab.planner.experts import MoE, expert_params
from grader.lab.planner.layers import LayerPlan, activation_bytes, bytes_moved, param_bytes
from grader.lab.planner.mesh import MeshPlan, mesh_plans, mesh_search, predict_mesh, why_not

GPUS = PRESETS["8 GPUs NVLink"]
LONG = Transformer(vocab=32000, width=1024, heads=8, blocks=4, seq=32768, batch=1,
                   itemsize=2)
SMALL = Transformer(vocab=256, width=64, heads=4, blocks=2, seq=64, batch=8)


def _on(n, memory=None):
    c = replace(GPUS, n=n)
    return c if memory is None else replace(c, memory=memory)


@pytest.mark.parametrize("tp,sp", [(1, False), (2, False), (4, True)])
def test_without_cp_or_experts_the_terms_are_the_layers_page_s(tp, sp):
    p = predict_mesh(SMALL, MeshPlan(tp=tp, sp=sp), _on(tp))
    assert p.memory_terms["params"] == param_bytes(SMALL, LayerPlan(tp, sp))
    assert p.memory_terms["activations"] == activation_bytes(SMALL, LayerPlan(tp, sp))
    assert p.sent.get("tp", 0.0) == pytest.approx(bytes_moved(SMALL, LayerPlan(tp, sp)))


@pytest.mark.parametrize("cp", [2, 4])
def test_cp_splits_the_activations_and_sends_three_blocks_per_step_and_layer(cp):
    base = predict_mesh(SMALL, MeshPlan(), _on(1))
    p = predict_mesh(SMALL, MeshPlan(cp=cp), _on(cp))
    assert p.memory_terms["activations"] == pytest.approx(
        base.memory_terms["activations"] / cp)
    block = RingAttention(SMALL.seq, SMALL.heads, SMALL.width // SMALL.heads,
                          SMALL.batch).block_bytes(cp)
    assert p.sent["cp"] == SMALL.blocks * step_blocks(cp) * block
    assert p.memory_terms["params"] == base.memory_terms["params"]   # weights whole
    zig, contig = (predict_mesh(SMALL, MeshPlan(cp=cp, layout=lay), _on(cp))
                   for lay in ("zigzag", "contiguous"))
    assert zig.terms["compute"] < contig.terms["compute"]            # the causal imbalance
    assert zig.memory == contig.memory


def test_experts_split_over_ep_and_exchange_four_buffers_per_layer():
    moe = MoE(8, 2, 1.0)
    one = predict_mesh(SMALL, MeshPlan(dp=4), _on(4), moe)
    ep = predict_mesh(SMALL, MeshPlan(dp=4, ep=4), _on(4), moe)
    shed = 3 / 4 * 8 * expert_params(moe, SMALL.width) * SMALL.blocks * SMALL.itemsize
    assert one.memory_terms["params"] - ep.memory_terms["params"] == pytest.approx(shed)
    tokens = SMALL.batch // 4 * SMALL.seq
    buffer = 8 * (tokens * 2 // 8) * SMALL.width * SMALL.itemsize
    assert ep.sent["ep"] == SMALL.blocks * 4 * 3 / 4 * buffer
    assert "ep" not in one.sent


def test_shapes_that_do_not_split_are_not_tried_and_say_why():
    assert why_not(SMALL, MeshPlan(tp=3)) == [
        "tp=3 does not divide the 4 heads and the vocabulary of 256"]
    assert "needs a mixture" in why_not(SMALL, MeshPlan(dp=2, ep=2))[0]
    assert "2 x cp = 256" in why_not(SMALL, MeshPlan(cp=128))[0]
    assert why_not(SMALL, MeshPlan(dp=4, ep=4), MoE(8)) == []
    plans = list(mesh_plans(SMALL, 8, MoE(8)))
    assert plans and all(not why_not(SMALL, p, MoE(8)) and p.devices == 8 for p in plans)
    assert {p.ep for p in plans} == {1, 2, 4, 8}
    with pytest.raises(ValueError, match="tp=3"):
        predict_mesh(SMALL, MeshPlan(tp=3), _on(3))


def test_the_search_takes_the_fastest_that_fits_and_refuses_the_rest_with_reasons():
    best, preds = mesh_search(LONG, _on(8, memory=12 * 2**30))
    fits = [p for p in preds if p.fits]
    refused = [p for p in preds if not p.fits]
    assert best is fits[0] and best.step_s == min(p.step_s for p in fits)
    assert refused and all(p.refused.startswith(str(p.plan)) and "GiB" in p.refused
                           for p in refused)
    assert all(p.refused == "" for p in fits)
    assert best.plan.cp > 1 and best.plan.layout == "zigzag"      # one sequence of 32k
    roomy, _ = mesh_search(LONG, _on(8))
    assert roomy.step_s <= best.step_s
    none, preds = mesh_search(LONG, _on(8, memory=2**30))
    assert none is None and all(p.refused for p in preds)


def test_zero_shards_the_model_states_as_the_sharding_planner_does():
    from grader.lab.planner import Plan, predict_plan

    c = _on(4)
    for z in range(4):
        mine = predict_mesh(SMALL, MeshPlan(dp=4, zero=z), c)
        theirs = predict_plan(SMALL, Plan(dp=4, zero=z), c)
        for kind in ("params", "grads", "optimizer"):
            assert mine.memory_terms[kind] == pytest.approx(theirs.memory_terms[kind])
        assert mine.sent["dp"] == pytest.approx(theirs.sent)
    z0, z3 = (predict_mesh(SMALL, MeshPlan(dp=2, cp=2, zero=z), c) for z in (0, 3))
    assert z3.memory_terms["optimizer"] == z0.memory_terms["optimizer"] / 4  # dp x cp
    assert "ZeRO-1 needs" in why_not(SMALL, MeshPlan(tp=2, zero=1))[0]
    assert {p.zero for p in mesh_plans(SMALL, 4)} == {0, 1, 2, 3}
