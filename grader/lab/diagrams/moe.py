"""Expert parallelism's dispatch and combine (chapters/context_expert.md): where each
token's choices land in its rank's dispatch buffer, which are dropped, and where the
first all-to-all delivers each part of the buffer.

The rules are the ``moe_{torch,paddle}.py`` scripts': an expert keeps at most
``capacity`` assignments from each rank (the planner's
:func:`~grader.lab.planner.experts.capacity`), first choices before second ones and
earlier tokens first; the buffer is ``experts x capacity`` slots, expert after expert;
``all_to_all_single`` sends its ``world`` equal parts to the ranks in order, so rank
``d`` receives, from every rank, the slots of its own experts. The tests compare
:func:`dispatch_plan` with the script's ``route`` on the same choices.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..planner.experts import MoE, capacity
from .draw import arrow, box, rank_color

__all__ = ["Assignment", "dispatch_plan", "received", "moe_diagram"]


@dataclass(frozen=True)
class Assignment:
    """Token ``token`` of rank ``rank``, its ``choice``-th expert ``expert``: its place
    ``position`` among what that expert was sent from this rank; kept if below the
    capacity, then in ``slot`` of the dispatch buffer and on rank ``to``."""
    rank: int
    token: int
    choice: int
    expert: int
    position: int
    kept: bool
    slot: int
    to: int


def dispatch_plan(choices: list[list[list[int]]], moe: MoE) -> list[Assignment]:
    """``choices[rank][token]``: the token's experts, best first (``top_k`` of them)."""
    world = len(choices)
    if moe.experts % world:
        raise ValueError(f"{moe.experts} experts do not split over {world} ranks")
    local = moe.experts // world
    out = []
    for rank, tokens in enumerate(choices):
        cap = capacity(len(tokens), moe)
        seen = [0] * moe.experts
        for choice in range(moe.top_k):           # choice-major: first choices first
            for token, picks in enumerate(tokens):
                if len(picks) != moe.top_k or len(set(picks)) != moe.top_k:
                    raise ValueError(f"rank {rank}'s token {token} chose {picks}: "
                                     f"give {moe.top_k} different experts")
                e = picks[choice]
                pos, seen[e] = seen[e], seen[e] + 1
                out.append(Assignment(rank, token, choice, e, pos, pos < cap,
                                      e * cap + pos, e // local))
    return out


def received(plan: list[Assignment], world: int, moe: MoE,
             tokens_per_rank: int) -> dict[int, list[Assignment | None]]:
    """What the first all-to-all leaves on each rank: its ``(source rank, its expert,
    capacity)`` slots in order, ``None`` where nothing was routed."""
    cap, local = capacity(tokens_per_rank, moe), moe.experts // world
    out = {d: [None] * (world * local * cap) for d in range(world)}
    for a in plan:
        if a.kept:
            out[a.to][(a.rank * local + a.expert % local) * cap + a.position] = a
    return out


def _name(rank: int, token: int) -> str:
    """Token ``token`` of rank ``rank``: rank 0's are a0, a1, ..., rank 1's b0, ..."""
    return f"{chr(ord('a') + rank)}{token}"


def _label(a: Assignment) -> str:
    return _name(a.rank, a.token)


def moe_diagram(choices: list[list[list[int]]], moe: MoE):
    """Each rank's tokens (coloured by their rank; the second choice paler), its
    dispatch buffer expert by expert, what it drops, and what the first all-to-all
    delivers to each rank's experts."""
    world, per_rank = len(choices), len(choices[0])
    plan = dispatch_plan(choices, moe)
    cap, local = capacity(per_rank, moe), moe.experts // world
    got = received(plan, world, moe, per_rank)
    import matplotlib.pyplot as plt

    slots = moe.experts * cap
    w = 0.55
    x_buf, x_got = 3.6, 3.6 + slots * w + 2.6
    x_exp = x_got + slots * w + 0.6
    lane = 2.9
    fig, ax = plt.subplots(figsize=(10.5, 1.0 + 1.45 * world))
    ax.set_xlim(-0.2, x_exp + 2.3)
    ax.set_ylim(-1.3, world * lane + 0.3)
    ax.axis("off")
    for r in range(world):
        y = (world - 1 - r) * lane + 0.9
        ax.text(-0.1, y + 1.05, f"rank {r}: its tokens", fontsize=8, color=rank_color(r),
                weight="bold")
        for t in range(per_rank):
            picks = ",".join(f"e{e}" for e in choices[r][t])
            box(ax, 0.75 * t, y, 0.7, 0.5, _name(r, t), fontsize=7, color=rank_color(r),
                alpha=0.85, gid=f"moe-token-{r}-{t}")
            ax.text(0.75 * t + 0.35, y - 0.3, picks, ha="center", fontsize=6.5)
        mine = [a for a in plan if a.rank == r]
        for e in range(moe.experts):
            for p in range(cap):
                a = next((a for a in mine if a.kept and a.slot == e * cap + p), None)
                box(ax, x_buf + (e * cap + p) * w, y, w, 0.5,
                    _label(a) if a else "", fontsize=7,
                    color=rank_color(r) if a else "white",
                    alpha=(0.85 if a.choice == 0 else 0.4) if a else 1.0,
                    gid=f"moe-slot-{r}-{e * cap + p}")
            ax.text(x_buf + (e + 0.5) * cap * w, y + 0.65, f"e{e}", ha="center",
                    fontsize=7)
        ax.text(x_buf, y + 1.05, f"dispatch buffer: {moe.experts} experts x {cap} slots",
                fontsize=7.5)
        lost = [a for a in mine if not a.kept]
        ax.text(-0.1, y - 0.7, "dropped: " + (", ".join(
            f"{_label(a)}→e{a.expert}" for a in lost) if lost else "none"),
            fontsize=7, color="#C44E52" if lost else "black", gid=f"moe-dropped-{r}")
        back = "  ".join(_name(r, t) + "←" + ",".join(
            f"e{a.expert}" for a in mine if a.token == t and a.kept) for t in range(per_rank))
        ax.text(-0.1, y - 1.05, f"back and combined: {back}", fontsize=7,
                gid=f"moe-back-{r}")
        for s in range(world):
            for j in range(local * cap):
                a = got[r][s * local * cap + j]
                box(ax, x_got + (s * local * cap + j) * w, y, w, 0.5,
                    _label(a) if a else "", fontsize=7,
                    color=rank_color(s) if a else "white",
                    alpha=(0.85 if a.choice == 0 else 0.4) if a else 1.0,
                    gid=f"moe-got-{r}-{s * local * cap + j}")
            ax.text(x_got + (s + 0.5) * local * cap * w, y + 0.65, f"from rank {s}",
                    ha="center", fontsize=7, color=rank_color(s))
        ax.text(x_got, y + 1.15, f"received: rank {r}'s experts "
                f"e{r * local}..e{(r + 1) * local - 1}", fontsize=7.5)
        box(ax, x_exp, y - 0.1, 2.1, 0.7, f"experts e{r * local}..e{(r + 1) * local - 1}"
            "\ncompute", fontsize=7, color="#EEEEEE")
        arrow(ax, (x_got + slots * w, y + 0.25), (x_exp, y + 0.25))
    for s in range(world):            # the first all-to-all: part d of s's buffer to d
        for d in range(world):
            ys = (world - 1 - s) * lane + 0.9
            yd = (world - 1 - d) * lane + 0.9
            x0 = x_buf + (d + 0.5) * local * cap * w
            x1 = x_got + (s + 0.5) * local * cap * w
            if d == s:                # stays on the rank: under the boxes
                start, end, rad = (x0, ys - 0.02), (x1, yd - 0.02), 0.25
            elif d > s:               # to a rank drawn lower
                start, end, rad = (x0, ys - 0.02), (x1, yd + 0.85), 0.0
            else:
                start, end, rad = (x0, ys + 0.52), (x1, yd - 0.02), 0.0
            arrow(ax, start, end, color=rank_color(s), rad=rad)
    ax.text((x_buf + x_exp) / 2, -1.0, "all-to-all out (arrows): part d of every rank's "
            "buffer goes to rank d. All-to-all back: the same exchange returns the\n"
            "experts' outputs to their slots. Combine: each token adds its kept experts' "
            "outputs, weighted by their gates; a dropped choice adds nothing.",
            ha="center", va="center", fontsize=7)
    fig.tight_layout()
    return fig
