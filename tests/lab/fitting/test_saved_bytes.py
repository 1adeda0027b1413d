"""The fitting chapter's measurements, on its model, in both frameworks: what a block
saves equals the page's formula term by term (16 s·b·h values and a·s²·b scores, 4
bytes each), the rest being exactly the norms' statistics and the masks; recomputation
changes no gradient; BF16 autocast stays within a stated distance of FP32."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[3] / "chapters" / "scripts"
sys.path.insert(0, str(SCRIPTS))

from grader.lab import planner  # noqa: E402
from grader.lab.fitting.breakdown import sort_saved  # noqa: E402

S, B, H, A = 32, 16, 64, 4                      # TinyGPT's sizes, as the page states them
FORMULA = 4 * (16 * S * B * H + A * S * S * B)  # the page's bytes per block, FP32, no dropout
STATS = 2 * 2 * S * B * 4                       # two norms' mean and 1/std (or variance)
BF16_LOSS_DISTANCE = 0.05                       # the page's stated bound over 20 steps


def _count(fw, mode="none"):
    model = fw.build(mode)
    counter = fw.SavedTensors(model)
    x, y = fw.batch(0)
    with counter.hooks():
        loss = fw.loss_fn(fw.forward(model, x, mode), y)
    counter.forward = False
    loss.backward()
    return counter, model


@pytest.fixture(scope="module", params=["torch", "paddle"])
def fw(request):
    if request.param == "torch":
        import torch

        torch.set_num_threads(1)
        import fitting_torch as mod
    else:
        pytest.importorskip("paddle")
        import fitting_paddle as mod
    return mod


def test_every_block_saves_the_formulas_terms_and_only_statistics_and_masks_besides(fw):
    counter, _ = _count(fw)
    layers = counter.layers()
    blocks = [n for k, n in layers.items() if k.startswith("block")]
    assert len(blocks) == 4 and len(set(blocks)) == 1
    kinds = sort_saved(counter.shapes, "block 0", S, B, H, A)
    assert kinds["s·b·h-sized"] == 4 * 16 * S * B * H
    assert kinds["attention scores"] == 4 * A * S * S * B
    assert kinds["norm statistics"] == STATS and kinds["other"] == 0
    # torch's masked_fill keeps the s x s mask, Paddle's where the mask broadcast to
    # the scores' shape: one byte per entry either way
    assert kinds["masks"] in (S * S, A * S * S * B)
    assert blocks[0] == FORMULA + STATS + kinds["masks"]
    assert abs(blocks[0] - FORMULA) / FORMULA < 0.035     # the page's "within" figure


def test_the_counter_rises_through_forward_and_falls_to_nothing_through_backward(fw):
    counter, _ = _count(fw)
    held = [b for _, b in counter.curve]
    peak = held.index(max(held))
    assert max(held) == counter.total()
    assert held[:peak + 1] == sorted(held[:peak + 1])      # forward only adds
    assert held[-1] == 0 and held[peak:] == sorted(held[peak:], reverse=True)


def test_recomputation_keeps_less_and_changes_no_gradient(fw):
    ref, ref_model = _count(fw, "none")
    totals = {}
    for mode in ("selective", "full"):
        counter, model = _count(fw, mode)
        totals[mode] = counter.total()
        for p, q in zip(ref_model.parameters(), model.parameters()):
            assert float((p.grad - q.grad).abs().max()) == 0.0, mode
    # selective drops exactly the scores and the mask; full keeps block inputs only
    masks = sort_saved(ref.shapes, "block 0", S, B, H, A)["masks"]
    assert ref.total() - totals["selective"] == 4 * (4 * A * S * S * B + masks)
    assert totals["full"] == ref.total() - 4 * (FORMULA + STATS + masks) + 4 * 4 * S * B * H


def test_the_planners_coarse_count_is_near_the_measured_one(fw):
    counter, _ = _count(fw)
    model = planner.Transformer(vocab=128, width=H, heads=A, blocks=4, seq=S, batch=B)
    pred = planner.activations.memory_terms(model, planner.Plan())["activations"]
    assert abs(pred - counter.total()) / counter.total() < 0.05


def test_bf16_autocast_training_stays_near_fp32_and_keeps_fp32_weights():
    import torch

    import fitting_torch as ft

    torch.set_num_threads(1)
    m32, fp32 = ft.train(20)
    m16, bf16 = ft.train(20, dtype=torch.bfloat16)
    assert max(abs(a - b) for a, b in zip(fp32, bf16)) < BF16_LOSS_DISTANCE
    assert fp32[-1] < fp32[0] - 1                           # it did learn
    assert {p.dtype for p in m16.parameters()} == {torch.float32}
