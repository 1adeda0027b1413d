"""The ring diagram draws what the ring-attention script computes: the script's own loop,
run here rank by rank with its sends and receives played in one process, computes
exactly the chunk pairs the diagram lists, at the steps it says; those pairs cover the
causal mask of the whole sequence once; and the recorded runs counted as many per rank."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from grader.lab.diagrams import ring_blocks, ring_diagram, token_mask  # noqa: E402
from grader.lab.diagrams.draw import drawn  # noqa: E402
from grader.lab.planner.context import chunks_of, ring_pairs  # noqa: E402

from .scripts import function_ast, script  # noqa: E402

RECORDED = Path(__file__).resolve().parents[1] / "context_expert" / "recorded"


class _Done:
    def wait(self):
        pass


def _script_blocks(world: int, layout: str, causal: bool, monkeypatch) -> set:
    """Run ring_attention_torch.ring_attention for every rank in this process: each
    chunk's queries and keys hold the chunk's number, the receive hands over the block
    the previous rank holds, and block_attention notes which chunks met."""
    import torch

    ring = script("ring_attention_torch")
    c = 2

    def kv_of(holder):
        keys = torch.cat([torch.full((1, c, 1), float(i))
                          for i in ring.chunks_of(holder, world, layout)], 1)
        return torch.stack([keys, keys])

    met, state = [], {}

    def block_attention(q, k, v, diagonal):
        met.append((state["rank"], int(q[0, 0, 0]), int(k[0, 0, 0]), bool(diagonal)))
        return torch.zeros_like(q), torch.zeros(q.shape[:2])

    def irecv(tensor, src):
        state["received"] += 1
        tensor.copy_(kv_of((state["rank"] - state["received"]) % world))
        return _Done()

    monkeypatch.setattr(ring, "block_attention", block_attention)
    monkeypatch.setattr(ring.dist, "isend", lambda tensor, dst: _Done())
    monkeypatch.setattr(ring.dist, "irecv", irecv)
    out = set()
    for rank in range(world):
        state.update(rank=rank, received=0)
        mine = ring.chunks_of(rank, world, layout)
        q_chunks = [torch.full((1, c, 1), float(i)) for i in mine]
        met.clear()
        _, pairs, _ = ring.ring_attention(q_chunks, kv_of(rank), layout, causal, rank, world)
        assert pairs == len(met)
        # the step at which a key chunk is held: its holder is rank - step
        holder = {i: h for h in range(world) for i in ring.chunks_of(h, world, layout)}
        out |= {(r, (r - holder[k]) % world, q, k, d) for r, q, k, d in met}
    return out


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("layout,causal", [("contiguous", False), ("contiguous", True),
                                           ("zigzag", True)])
def test_the_script_computes_the_pairs_the_diagram_lists(world, layout, causal,
                                                         monkeypatch):
    listed = {(b.rank, b.step, b.query, b.key, b.diagonal)
              for b in ring_blocks(world, layout, causal)}
    assert _script_blocks(world, layout, causal, monkeypatch) == listed


def test_both_scripts_and_the_planner_assign_the_same_chunks():
    torch_def = function_ast("ring_attention_torch", "chunks_of")
    assert ast.dump(function_ast("ring_attention_paddle", "chunks_of")) == \
        ast.dump(torch_def)
    ring = script("ring_attention_torch")
    for world in (1, 2, 4, 8):
        for layout in ("contiguous", "zigzag"):
            for r in range(world):
                assert ring.chunks_of(r, world, layout) == chunks_of(r, world, layout)
    assert [chunks_of(r, 4, "zigzag") for r in range(4)] == [[0, 7], [1, 6], [2, 5], [3, 4]]


@pytest.mark.parametrize("world", [1, 2, 4, 8])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_the_computed_pairs_are_the_causal_mask_once(world, layout):
    chunk = 3
    n = 2 * world * chunk
    causal = token_mask(ring_blocks(world, layout), world, chunk)
    assert (causal == np.tril(np.ones((n, n), dtype=bool))).all()
    assert token_mask(ring_blocks(world, layout, causal=False), world, chunk).all()
    per_rank = [sum(b.rank == r for b in ring_blocks(world, layout))
                for r in range(world)]
    assert per_rank == ring_pairs(world, layout)


def test_a_pair_counted_twice_is_refused():
    blocks = ring_blocks(2, "zigzag")
    with pytest.raises(ValueError, match="more than once"):
        token_mask(blocks + blocks[:1], 2, 2)


@pytest.mark.parametrize("record", ["r4.json", "pr4.json"])
def test_the_recorded_runs_held_the_drawn_chunks_and_computed_the_drawn_pairs(record):
    run = json.loads((RECORDED / record).read_text())
    world = run["world"]
    for conf in run["runs"]:
        blocks = ring_blocks(world, conf["layout"], conf["causal"])
        for r in conf["ranks"]:
            assert r["chunks"] == chunks_of(r["rank"], world, conf["layout"])
            assert r["pairs"] == sum(b.rank == r["rank"] for b in blocks)


def test_the_drawing_shows_each_computed_pair_at_its_step_and_masks_the_rest():
    fig = ring_diagram(4)
    for layout in ("contiguous", "zigzag"):
        blocks = ring_blocks(4, layout)
        shown = drawn(fig, f"ring-{layout}-r")
        assert set(shown) == {f"ring-{layout}-r{b.rank}-s{b.step}-q{b.query}-k{b.key}"
                              for b in blocks}
        masked = drawn(fig, f"ring-{layout}-masked-")
        computed = {(b.query, b.key) for b in blocks}
        assert {tuple(int(x) for x in g.split("-")[-2:]) for g in masked} == \
            {(q, k) for q in range(8) for k in range(8)} - computed
        # each computed pair is filled with the colour of the rank that computes it
        from grader.lab.diagrams.draw import rank_color
        from matplotlib.colors import to_rgb
        for b in blocks:
            patch = shown[f"ring-{layout}-r{b.rank}-s{b.step}-q{b.query}-k{b.key}"]
            assert patch.get_facecolor()[:3] == pytest.approx(to_rgb(rank_color(b.rank)))
