"""The f/g diagram draws the tensor-parallel scripts' split: each rank's columns of the
first weight and rows of the second are the hidden units ``mine_of`` gives it, and f and
g communicate in exactly the passes the drawing names."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from grader.lab.diagrams import OPERATORS, fg_diagram, mlp_shards  # noqa: E402
from grader.lab.diagrams.draw import drawn  # noqa: E402
from grader.lab.tensor_parallel.results import MODEL  # noqa: E402

from .scripts import script  # noqa: E402


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_each_ranks_shards_are_the_hidden_units_the_script_gives_it(tp):
    tp_torch = script("tp_torch")
    hidden = 4 * tp_torch.WIDTH
    assert MODEL.width == tp_torch.WIDTH            # the page's model is the script's
    for s in mlp_shards(tp_torch.WIDTH, tp):
        units = tp_torch.mine_of(s.rank, hidden // tp).tolist()
        assert list(range(s.start, s.stop)) == units, s


def test_the_drawn_shards_are_the_shards():
    fig = fg_diagram(64, 2)
    rects = drawn(fig, "fg-")
    for s in mlp_shards(64, 2):
        r = rects[f"fg-{s.matrix}-{s.rank}"]
        whole = 4 * 64
        if s.matrix == "A":          # columns, left to right, of a 2.4 wide matrix
            assert r.get_width() == pytest.approx(2.4 * (s.stop - s.start) / whole)
            assert r.get_x() == pytest.approx(3.6 + 2.4 * s.start / whole)
        else:                        # rows, top to bottom, of a 1.5 tall matrix
            assert r.get_height() == pytest.approx(1.5 * (s.stop - s.start) / whole)
    with pytest.raises(ValueError, match="do not split"):
        mlp_shards(64, 3)


def test_f_and_g_communicate_in_the_passes_the_drawing_names(monkeypatch):
    import torch

    tp_torch = script("tp_torch")
    calls = []
    monkeypatch.setattr(tp_torch.dist, "all_reduce", lambda t, **kw: calls.append(1))
    seen = {}
    for name, op in (("f", tp_torch.Copy), ("g", tp_torch.Reduce)):
        x = torch.ones(3, requires_grad=True)
        calls.clear()
        y = op.apply(x)
        forward = len(calls)
        y.sum().backward()
        backward = len(calls) - forward
        seen[name] = {p: "all-reduce" if n else "identity"
                      for p, n in (("forward", forward), ("backward", backward))}
    assert seen == OPERATORS
    texts = drawn(fg_diagram(64, 2), "fg-")
    for name, passes in OPERATORS.items():
        for p, what in passes.items():
            assert texts[f"fg-{name}-{p}"].get_text() == f"{name} {p}: {what}"
