"""The dispatch diagram places tokens as the mixture-of-experts script does: its
``route`` keeps the same assignments in the same slots and drops the same ones, and the
all-to-all (as ``all_to_all_single`` defines it, in the script's view of what arrives)
delivers each slot where the diagram draws it."""
from __future__ import annotations

import random

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from grader.lab.diagrams import dispatch_plan, moe_diagram, received  # noqa: E402
from grader.lab.diagrams.draw import drawn  # noqa: E402
from grader.lab.planner.experts import MoE, capacity  # noqa: E402

from .scripts import diagram_cells, script  # noqa: E402



def _page_choices():
    """The routing the page draws (its cell's ``choices = ...``)."""
    import ast

    code = next(c for _, c in diagram_cells("context_expert") if "moe_diagram(" in c)
    assign = next(n for n in ast.parse(code).body if isinstance(n, ast.Assign)
                  and getattr(n.targets[0], "id", "") == "choices")
    return ast.literal_eval(assign.value)


PAGE = _page_choices()


def _choices(rng: random.Random, world: int, tokens: int, experts: int, k: int):
    return [[rng.sample(range(experts), k) for _ in range(tokens)] for _ in range(world)]


def _route(moe_torch, picks: list[list[int]], cap: int):
    """The script's route on a router that ranks each token's experts as ``picks``."""
    import torch

    logits = torch.zeros(len(picks), moe_torch.EXPERTS)
    for t, p in enumerate(picks):
        for i, e in enumerate(p):
            logits[t, e] = 10.0 - i
    x = torch.zeros(len(picks), 1)
    return moe_torch.route(x, lambda _: logits, cap)


@pytest.mark.parametrize("case", range(6))
def test_the_scripts_route_keeps_and_drops_what_the_diagram_shows(case):
    moe_torch = script("moe_torch")
    rng = random.Random(case)
    factor = (0.5, 1.0, 1.5)[case % 3]
    moe = MoE(moe_torch.EXPERTS, moe_torch.TOP_K, factor)
    choices = PAGE if case == 0 else _choices(rng, 2, 8, moe.experts, moe.top_k)
    plan = dispatch_plan(choices, moe)
    for rank, picks in enumerate(choices):
        cap = capacity(len(picks), moe)
        (token, slot, _), sent, held = _route(moe_torch, picks, cap)
        mine = [a for a in plan if a.rank == rank]
        assert sorted(zip(token.tolist(), slot.tolist())) == \
            sorted((a.token, a.slot) for a in mine if a.kept)
        assert sent.tolist() == [sum(a.expert == e for a in mine)
                                 for e in range(moe.experts)]
        assert held.tolist() == [sum(a.expert == e and a.kept for a in mine)
                                 for e in range(moe.experts)]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_the_all_to_all_delivers_each_slot_where_the_diagram_draws_it(world):
    import torch

    moe_torch = script("moe_torch")
    moe = MoE(4, 2, 1.0)
    tokens = 6
    choices = _choices(random.Random(world), world, tokens, 4, 2)
    cap = capacity(tokens, moe)
    plan = dispatch_plan(choices, moe)
    buffers = []
    for rank, picks in enumerate(choices):
        (token, slot, _), _, _ = _route(moe_torch, picks, cap)
        # each token's row holds its name: rank * 100 + token + 1 (0: an empty slot)
        x = torch.tensor([[rank * 100 + t + 1.0] for t in range(tokens)])
        buffers.append(moe_torch.dispatch(x, token, slot, cap).view(world, -1))
    got = received(plan, world, moe, tokens)
    for d in range(world):   # all_to_all_single: part d of every rank's buffer, in order
        arrived = torch.cat([buffers[s][d] for s in range(world)]).tolist()
        assert arrived == [0 if a is None else a.rank * 100 + a.token + 1
                           for a in got[d]]


def test_the_drawing_shows_the_plan():
    moe = MoE(4, 2, 1.0)
    fig = moe_diagram(PAGE, moe)
    plan = dispatch_plan(PAGE, moe)
    texts = drawn(fig, "moe-")
    cap = capacity(4, moe)
    for rank in range(2):
        for slot in range(4 * cap):
            a = next((a for a in plan if a.rank == rank and a.kept and a.slot == slot), None)
            want = f"{'ab'[a.rank]}{a.token}" if a else ""
            got = texts.get(f"moe-slot-{rank}-{slot}:text")
            assert (got.get_text() if got else "") == want
        lost = [a for a in plan if a.rank == rank and not a.kept]
        assert texts[f"moe-dropped-{rank}"].get_text() == "dropped: " + ", ".join(
            f"{'ab'[a.rank]}{a.token}→e{a.expert}" for a in lost)
        assert len(lost) == 1        # the page's example drops one choice on each rank
        back = [f"{'ab'[rank]}{t}←" + ",".join(f"e{a.expert}" for a in plan if a.rank == rank
                                               and a.token == t and a.kept) for t in range(4)]
        assert texts[f"moe-back-{rank}"].get_text() == \
            "back and combined: " + "  ".join(back)
        for i, a in enumerate(received(plan, 2, moe, 4)[rank]):
            got = texts.get(f"moe-got-{rank}-{i}:text")
            assert (got.get_text() if got else "") == \
                (f"{'ab'[a.rank]}{a.token}" if a else "")


def test_a_token_without_its_k_different_experts_is_refused():
    with pytest.raises(ValueError, match="different experts"):
        dispatch_plan([[[1, 1]]], MoE(4, 2))
    with pytest.raises(ValueError, match="do not split"):
        dispatch_plan([[[0, 1]]] * 3, MoE(4, 2))
