"""planner.composed.Layout: one description of a 4-D layout, translated to the
planner's two older ones for the same degrees."""
from __future__ import annotations

import pytest

from grader.lab.planner import PRESETS, Transformer
from grader.lab.planner.composed import Layout, predict

MODEL = Transformer(vocab=64, width=32, heads=4, blocks=2, seq=16, batch=8, opt_states=0)


def test_text_round_trips_and_counts_ranks():
    lay = Layout.parse("2x2x2x2")
    assert lay.text == "2x2x2x2" and lay.ranks == 16 and lay.dp == 4
    assert lay.mesh_shape == (2, 2, 2, 2) and str(lay) == "HSDP 2 x 2 + TP x2 + PP x2"
    assert str(Layout.parse("1x1x1x1")) == "1 device"


@pytest.mark.parametrize("bad", ["2x2x2", "0x1x1x1", "axbxcxd", ""])
def test_a_bad_text_is_refused_with_the_form_to_write(bad):
    with pytest.raises(ValueError, match="replicate x shard|at least 1"):
        Layout.parse(bad)


def test_the_older_descriptions_get_the_same_degrees():
    plan = Layout.parse("2x2x2x2").plan()
    assert (plan.dp, plan.replicas, plan.shard, plan.zero, plan.tp, plan.pp, plan.micro) \
        == (4, 2, 2, 3, 2, 2, 2)
    ddp = Layout.parse("4x1x1x1").plan()
    assert (ddp.dp, ddp.zero, ddp.replicas) == (4, 0, 1)
    mp = Layout.parse("1x2x2x1").mesh_plan()
    assert (mp.dp, mp.tp, mp.zero) == (2, 2, 3)
    with pytest.raises(ValueError, match="no pipeline"):
        Layout.parse("1x2x1x2").mesh_plan()


def test_predict_prices_the_layout_on_its_own_ranks():
    pred = predict(MODEL, Layout.parse("1x2x2x2"), PRESETS["8 GPUs NVLink"])
    assert pred.plan == Layout.parse("1x2x2x2").plan() and pred.memory > 0
    with pytest.raises(ValueError, match="do not split"):
        predict(MODEL, Layout.parse("1x16x1x1"), PRESETS["8 GPUs NVLink"])


# ---- the capstone's layouts as its functions build them (composed.memory_terms,
# composed.step_collectives): corrected by what the scale page's tracker measured
from collections import Counter  # noqa: E402

from grader.lab.planner import composed  # noqa: E402

CAPSTONE = Transformer(vocab=64, width=32, heads=4, blocks=2, seq=16, batch=8,
                       opt_states=2)


def _counts(layout: str, model=CAPSTONE, **kw) -> Counter:
    return Counter(op for op, _ in composed.step_collectives(model, Layout.parse(layout),
                                                             **kw))


def test_tensor_parallelism_splits_the_embedding_and_head_too():
    w, v = CAPSTONE.width, CAPSTONE.vocab
    block, root, blocks = composed.units(CAPSTONE, Layout.parse("1x1x4x1"))
    assert block == (12 * w * w + 4 * w) / 4 + 6 * w and blocks == 2
    assert root == (v * w + w * v + v) / 4 + 2 * w
    # a pipeline's first stage has the embedding alone, its last the norm and head
    assert composed.units(CAPSTONE, Layout.parse("1x1x1x2"))[1:] == (v * w, 1)
    assert composed.units(CAPSTONE, Layout.parse("1x1x1x2"), stage=1)[1] == \
        w * v + v + 2 * w


def test_fsdp_holds_its_shards_the_gathered_root_and_a_block():
    lay = Layout.parse("1x4x1x1")
    block, root, blocks = composed.units(CAPSTONE, lay)
    whole = (blocks * block + root) * 4
    mem = composed.memory_terms(CAPSTONE, lay)
    assert mem["params"] == whole / 4 + (root + block) * 4
    assert mem["grads"] == (blocks * block / 4 + root) * 4     # tp 1: no extra
    assert mem["optimizer"] == 2 * whole / 4
    # a shard group of one rank still gathers a copy of the unit beside the shard
    one = composed.memory_terms(CAPSTONE, Layout.parse("4x1x1x1"))
    assert one["params"] == (blocks * block + root) * 4 + (root + block) * 4


def test_the_embedding_gradient_is_whole_under_tensor_parallelism():
    lay = Layout.parse("1x2x2x1")
    block, root, blocks = composed.units(CAPSTONE, lay)
    extra = CAPSTONE.vocab * CAPSTONE.width * (1 - 1 / 2) * 4
    assert composed.memory_terms(CAPSTONE, lay)["grads"] == \
        pytest.approx((blocks * block / 2 + root) * 4 + extra)


def test_a_first_stage_keeps_no_logits():
    lay = Layout.parse("1x1x1x2")
    first = composed.memory_terms(CAPSTONE, lay)["activations"]
    last = composed.memory_terms(CAPSTONE, lay, stage=1)["activations"]
    assert last > first > 0


@pytest.mark.parametrize("layout, expected", [
    # FSDP: each block gathered twice, the root once; one reduce-scatter per unit
    ("1x4x1x1", {"all_gather": 5, "reduce_scatter": 3}),
    # HSDP adds one all-reduce per unit across the replicas
    ("2x2x1x1", {"all_gather": 5, "reduce_scatter": 3, "all_reduce": 3}),
    # TP: 6 all-reduces per block, the embedding's, the head's gather and all-reduce
    ("1x1x4x1", {"all_reduce": 14, "all_gather": 1}),
    # a replicate-only FSDP mesh gathers nothing
    ("4x1x1x1", {"all_reduce": 3}),
])
def test_the_collectives_of_a_step(layout, expected):
    assert _counts(layout) == Counter(expected)


def test_a_pipeline_stage_counts_as_pipelinestage_runs_fsdp():
    # the capstone's recorded 16-rank gloo run of 2x2x2x2 (rank 0, Schedule1F1B):
    # 4 all-gathers, 16 all-reduces, 2 reduce-scatters, 2 sends, 2 receives
    assert _counts("2x2x2x2") == Counter({"all_gather": 4, "all_reduce": 16,
                                          "reduce_scatter": 2, "send": 2, "recv": 2})
    # a middle stage sends and receives both ways, per micro-batch
    four = Transformer(vocab=64, width=32, heads=4, blocks=4, seq=16, batch=8)
    assert _counts("1x1x1x4", four, stage=1)["send"] == 2 * 2


def test_a_pipeline_stage_keeps_its_blocks_gathered_until_the_last_micro_batch():
    # PipelineStage under FSDP: no reshard and no reduction after the backward of any
    # micro-batch but the last, so every block of the stage is gathered at once
    model = Transformer(vocab=64, width=32, heads=4, blocks=8, seq=16, batch=8,
                        opt_states=2)
    lay = Layout.parse("1x2x1x2")                      # micro 2: 4 blocks a stage
    block, root, blocks = composed.units(model, lay)
    whole = (blocks * block + root) * 4
    mem = composed.memory_terms(model, lay)
    assert mem["params"] == whole / 2 + (root + 4 * block) * 4
    assert mem["grads"] == (4 * block + root) * 4      # unreduced; tp 1: no extra
    one = composed.memory_terms(model, Layout.parse("1x2x1x2", micro=1))
    assert one["params"] == whole / 2 + (root + block) * 4
