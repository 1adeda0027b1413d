"""Each page's diagram cell, as the page has it: shared by both tabs with its code
hidden, described by alt text and a caption, and what the alt text says is what the
cell draws (the cell is run here, on the page's own arguments)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from grader.lab.diagrams.draw import drawn  # noqa: E402
from grader.lab.planner.composed import Layout  # noqa: E402

from .scripts import diagram_cells  # noqa: E402

PAGES = {"tensor_parallel": ["fg_diagram"], "context_expert": ["ring_diagram", "moe_diagram"],
         "sharding": ["zero_diagram"], "capstone": ["mesh_diagram"]}


def _run(code: str):
    plt.close("all")
    exec(code, {"Layout": Layout})     # capstone's cell reads Layout from the one above
    fig = plt.gcf()
    return fig, {**drawn(fig, ""), "": None}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_each_diagram_is_shared_hidden_and_described(page):
    cells = diagram_cells(page)
    assert [next(f for f in PAGES[page] if f"{f}(" in code) for _, code in cells] == \
        PAGES[page]
    for options, _ in cells:
        assert options["tags"] == ["remove-input"]       # no tab's: both tabs show it
        assert len(options["mystnb"]["image"]["alt"]) > 80
        assert len(options["mystnb"]["figure"]["caption"]) > 80


def _cell(page: str, function: str) -> str:
    return next(code for _, code in diagram_cells(page) if f"{function}(" in code)


def test_the_tensor_parallel_diagram_gives_rank_0_the_first_half():
    fig, shown = _run(_cell("tensor_parallel", "fg_diagram"))
    a0, a1 = shown["fg-A-0"], shown["fg-A-1"]
    assert a0.get_x() < a1.get_x() and a0.get_width() == pytest.approx(a1.get_width())
    assert sum(g.startswith("fg-A-") and ":" not in g for g in shown) == 2   # 2 lanes


def test_the_ring_diagram_shows_3_7_11_15_and_9_pairs_on_4_ranks():
    fig, _ = _run(_cell("context_expert", "ring_diagram"))
    titles = [ax.get_title() for ax in fig.axes]
    assert "chunk pairs per rank: 3, 7, 11, 15" in titles[0]
    assert "chunk pairs per rank: 9, 9, 9, 9" in titles[1]


def test_the_moe_diagram_drops_one_choice_per_rank():
    fig, shown = _run(_cell("context_expert", "moe_diagram"))
    for rank in (0, 1):
        said = shown[f"moe-dropped-{rank}"].get_text()
        assert said.startswith("dropped: ") and said.count("→") == 1
    slots = [g for g in shown if g.startswith("moe-slot-0-") and ":" not in g]
    assert len(slots) == 8                     # 4 experts x 2 slots


def test_the_zero_diagram_grows_stage_2s_parameters_and_splits_the_rest():
    fig, shown = _run(_cell("sharding", "zero_diagram"))
    for n in (2, 4):
        h = {(s, k): shown[f"zero-{n}-{s}-{k}"].get_height() for s in range(4)
             for k in ("params", "grads", "optimizer")}
        assert h[(2, "params")] > h[(1, "params")] == h[(0, "params")]
        assert h[(1, "optimizer")] < h[(0, "optimizer")]
        assert h[(2, "grads")] < h[(1, "grads")]
        assert h[(3, "params")] < h[(0, "params")]


def test_the_mesh_diagram_shows_rank_0s_groups():
    fig, shown = _run(_cell("capstone", "mesh_diagram"))
    assert shown["mesh-0-0-0-0:text"].get_text() == "rank 0"
    assert shown["mesh-1-1-1-1:text"].get_text() == "rank 15"
    words = shown["mesh-owners"].get_text()
    assert 'apply_tp(model, mesh["tp"]): ranks 0, 1' in words
    assert 'apply_pp(model, mesh["pp"]): ranks 0, 8' in words
    assert 'mesh["dp_replicate", "dp_shard"]): ranks 0, 2, 4, 6' in words
