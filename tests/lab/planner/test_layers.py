"""The planner's tensor- and sequence-parallel accounting (planner.layers), on the sizes
alone: what splits, what stays whole, which collectives a step runs."""
from collections import Counter

import pytest

from grader.lab.planner import Transformer, ring_bytes
from grader.lab.planner.layers import (LayerPlan, activation_bytes, bytes_moved,
                                       collectives, korthikanti, param_bytes)

GPT = Transformer(vocab=128, width=64, heads=4, blocks=4, seq=32, batch=16)


def test_one_rank_holds_the_whole_model():
    assert param_bytes(GPT, LayerPlan(1)) == 4 * GPT.params
    assert collectives(GPT, LayerPlan(1)) == []


def test_only_the_norms_and_row_biases_stay_whole_in_the_blocks():
    w = GPT.width
    by_hand = [param_bytes(GPT, LayerPlan(t, vocab_parallel=False)) for t in (1, 2, 4)]
    # halving tp's share: the split part halves, the rest (6w per block, ends) stays
    split = 4 * GPT.blocks * (12 * w * w + 4 * w)
    assert by_hand[0] - by_hand[1] == pytest.approx(split / 2)
    assert by_hand[1] - by_hand[2] == pytest.approx(split / 4)
    assert param_bytes(GPT, LayerPlan(2)) < by_hand[1]      # + embedding and head split


def test_megatron_runs_two_all_reduces_per_block_each_way():
    calls = collectives(GPT, LayerPlan(2, vocab_parallel=False))
    x = GPT.seq * GPT.batch * GPT.width * 4
    assert Counter(calls) == {("forward", "all_reduce", x, 2): 2 * GPT.blocks,
                              ("backward", "all_reduce", x, 2): 2 * GPT.blocks}


def test_sequence_parallelism_turns_each_all_reduce_into_a_reduce_scatter_and_a_gather():
    tp = Counter((p, op, s) for p, op, s, _ in collectives(GPT, LayerPlan(4)))
    sp = Counter((p, op, s) for p, op, s, _ in collectives(GPT, LayerPlan(4, sp=True)))
    x = GPT.seq * GPT.batch * GPT.width * 4
    for phase in ("forward", "backward"):
        assert sp[(phase, "reduce_scatter", x)] == sp[(phase, "all_gather", x)] \
            == tp[(phase, "all_reduce", x)]
        assert sp[(phase, "all_reduce", x)] == 0
    # the same bytes on a ring: reduce-scatter + all-gather is how a ring all-reduces
    assert ring_bytes("reduce_scatter", x, 4) + ring_bytes("all_gather", x, 4) == \
        ring_bytes("all_reduce", x, 4)
    norms = 2 * GPT.blocks + 1                 # their weights' and biases' gradients
    assert sp[("backward", "all_reduce", GPT.width * 4)] == 2 * norms
    assert bytes_moved(GPT, LayerPlan(4, sp=True)) > bytes_moved(GPT, LayerPlan(4))


def test_activations_fall_with_tp_and_further_with_sp():
    tp = [activation_bytes(GPT, LayerPlan(t)) for t in (1, 2, 4)]
    sp = [activation_bytes(GPT, LayerPlan(t, sp=True)) for t in (1, 2, 4)]
    assert tp[0] == sp[0]
    assert tp[0] > tp[1] > tp[2] and sp[1] < tp[1] and sp[2] < tp[2]
    # Megatron's backward gathers again instead of keeping the gathered input
    assert activation_bytes(GPT, LayerPlan(4, sp=True), keep_gathered=False) < sp[2]


def test_the_papers_formula_falls_by_tp_under_sp():
    one = korthikanti(GPT, 1, sp=False)
    assert korthikanti(GPT, 1, sp=True) == one        # at tp 1 both are sbh(34 + 5as/h)
    assert korthikanti(GPT, 4, sp=True) == pytest.approx(one / 4)
    assert korthikanti(GPT, 4, sp=False) > one / 4


def test_fsdp_across_gathers_each_unit_and_scatters_its_gradients():
    calls = Counter((p, op) for p, op, _, r in collectives(GPT, LayerPlan(2, dp=2))
                    if r == 2 and op != "all_reduce")
    assert calls[("forward", "all_gather")] == GPT.blocks + 1
    assert calls[("backward", "all_gather")] == GPT.blocks
    assert calls[("backward", "reduce_scatter")] == GPT.blocks + 1
    assert param_bytes(GPT, LayerPlan(2, dp=2)) == param_bytes(GPT, LayerPlan(2)) / 2


@pytest.mark.parametrize("plan", [LayerPlan(3), LayerPlan(2, dp=3)])
def test_a_plan_that_does_not_split_evenly_is_refused_in_words(plan):
    with pytest.raises(ValueError, match="tp=3|dp=3"):
        param_bytes(GPT, plan)
