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
