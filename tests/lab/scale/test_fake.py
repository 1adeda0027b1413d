"""grader.lab.scale.fake: one rank of a large layout tracked in this process."""
from __future__ import annotations

import pytest

from grader.lab.planner import composed
from grader.lab.planner.composed import Layout
from grader.lab.scale import compare as scale
from grader.lab.scale import release, track


@pytest.fixture(scope="module", autouse=True)
def _fake_world():
    yield
    release()


@pytest.mark.slow          # two tracked steps, Adam's update the slower (~3 CPU-s)
def test_the_step_s_total_peak_comes_before_adams_update():
    # what the page says of the update it leaves out: tracked with it, the total's
    # peak is the same, and at that peak the optimizer holds its two moments alone
    layout = Layout.parse("1x64x8x1")
    without = track(layout, scale.LLAMA3_8B, blocks=1)
    with_update = track(layout, scale.LLAMA3_8B, blocks=1, update=True)
    assert with_update.peak == without.peak
    states = composed.memory_terms(with_update.model, layout)["optimizer"]
    assert with_update.at_peak["optimizer"] == pytest.approx(states, rel=0.01)
    # the update's intermediate results are filed as optimizer memory, after the peak
    assert with_update.memory["optimizer"] > with_update.at_peak["optimizer"]


def test_track_refuses_a_layout_the_sizes_do_not_split():
    with pytest.raises(ValueError, match="do not split over 128"):
        track(Layout.parse("1x128x1x1"), scale.LLAMA3_8B, blocks=1)
    with pytest.raises(ValueError, match="float32"):
        track(Layout.parse("1x64x1x1"), scale.LLAMA3_8B.__class__(
            128, 64, 4, 1, 16, 64, itemsize=2), blocks=1)


@pytest.mark.slow          # two tracked steps (~3 CPU-s)
def test_a_first_stage_s_blocks_hold_what_the_planner_counts_per_block():
    # tracked at two depths, the stage's added block holds the planner's per-block
    # activations: what the stage holds beyond them is at its edges
    layout = Layout.parse("1x32x8x2")
    two, four = (track(layout, scale.LLAMA3_8B, blocks=b) for b in (2, 4))
    per_block = four.memory["activations"] - two.memory["activations"]   # one block
    planned = (composed.memory_terms(four.model, layout)["activations"]
               - composed.memory_terms(two.model, layout)["activations"])
    assert per_block > 0 and per_block == pytest.approx(planned, rel=scale.TOLERANCE)


@pytest.mark.slow          # 32 blocks tracked (~5-8 CPU-s each)
@pytest.mark.parametrize("text", ["1x64x8x1", "1x32x8x2"])
def test_at_the_whole_depth_the_planner_holds_each_kind_within_the_tolerance(text):
    # the page tracks 2 blocks and adds the other 30 by the planner: here all 32 are
    # tracked. The pipeline's stage (16 blocks) is where a 2-block model hid that
    # PipelineStage keeps every block gathered until the last micro-batch's backward
    layout = Layout.parse(text)
    tracked = track(layout, scale.LLAMA3_8B)
    planned = composed.memory_terms(scale.LLAMA3_8B, layout)
    for kind, size in tracked.memory.items():
        assert size == pytest.approx(planned[kind], rel=scale.TOLERANCE), kind


def test_the_tracker_alone_refuses_a_stage_called_once_per_micro_batch(monkeypatch):
    # what the page says of FSDPMemTracker and pipelines: called for each micro-batch
    # without the module around it, the stage reads as a new step, which it refuses
    from grader.lab.scale import fake

    monkeypatch.setattr(fake, "_first_stage", lambda net: lambda xs: [net(x) for x in xs])
    with pytest.raises(NotImplementedError, match="multiple iterative calls"):
        track(Layout.parse("1x32x8x2"), scale.LLAMA3_8B, blocks=2)
