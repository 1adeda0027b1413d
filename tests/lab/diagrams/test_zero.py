"""The ZeRO bars are the planner's bytes: each drawn segment's height is what
predict_plan says one rank holds of that state at that stage, stacked in order."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from grader.lab import planner  # noqa: E402
from grader.lab.diagrams import zero_bars, zero_diagram  # noqa: E402
from grader.lab.diagrams.draw import drawn  # noqa: E402
from grader.lab.diagrams.zero import MIB, STATES  # noqa: E402
from grader.lab.sharding.measure import MODEL  # noqa: E402


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_the_bars_are_the_planners_bytes(ranks):
    gpus = planner.with_devices(planner.PRESETS["8 GPUs NVLink"], ranks)
    bars = zero_bars(MODEL, ranks)
    assert sorted(bars) == [0, 1, 2, 3]
    for stage, held in bars.items():
        terms = planner.predict_plan(MODEL, planner.Plan(dp=ranks, zero=stage),
                                     gpus).memory_terms
        assert held == {k: terms[k] for k in STATES}
    # what ZeRO's stages promise, in the planner's numbers: the optimizer state is split
    # from stage 1 on, the gradients from stage 2, and stage 3 holds the least
    assert bars[1]["optimizer"] == pytest.approx(bars[0]["optimizer"] / ranks)
    assert bars[2]["grads"] == pytest.approx(bars[0]["grads"] / ranks)
    assert sum(bars[3].values()) < sum(bars[1].values()) < sum(bars[0].values())


def test_the_drawn_segments_are_the_bars():
    fig = zero_diagram(MODEL, (2, 4))
    shown = drawn(fig, "zero-")
    assert len(shown) == 2 * 4 * len(STATES)
    for n in (2, 4):
        for stage, held in zero_bars(MODEL, n).items():
            bottom = 0.0
            for kind in STATES:
                bar = shown[f"zero-{n}-{stage}-{kind}"]
                assert bar.get_height() == pytest.approx(held[kind] / MIB)
                assert bar.get_y() == pytest.approx(bottom)
                assert bar.get_x() + bar.get_width() / 2 == pytest.approx(stage)
                bottom += held[kind] / MIB
