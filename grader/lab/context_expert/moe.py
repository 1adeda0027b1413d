"""Reading a mixture-of-experts run (what ``moe_{torch,paddle}.py`` write): the load on
each expert, the drops the capacity rule implies, the bytes exchanged, a sentence and a
figure."""
from __future__ import annotations

__all__ = ["expert_load", "capacity_dropped", "exchange_bytes", "drop_words",
           "load_figure"]


def expert_load(conf: dict) -> dict[str, list[int]]:
    """One capacity factor's run: assignments each expert was sent, kept and dropped,
    summed over the ranks that sent them."""
    ranks = conf["ranks"]
    experts = len(ranks[0]["sent"])
    sent = [sum(r["sent"][e] for r in ranks) for e in range(experts)]
    kept = [sum(r["kept"][e] for r in ranks) for e in range(experts)]
    return {"sent": sent, "kept": kept, "dropped": [s - k for s, k in zip(sent, kept)]}


def capacity_dropped(sent_by_rank: list[list[int]], capacity: int) -> list[int]:
    """The capacity rule: an expert keeps at most ``capacity`` assignments from each
    rank, so it drops what each rank sent it beyond that."""
    experts = len(sent_by_rank[0])
    return [sum(max(0, row[e] - capacity) for row in sent_by_rank)
            for e in range(experts)]


def exchange_bytes(conf: dict) -> list[tuple[str, int]]:
    """The exchanges one rank ran in the forward and backward pass, with their sizes
    (the same on every rank: every expert gets ``capacity`` slots from every rank)."""
    first = [tuple(c) for c in conf["ranks"][0]["collectives"]]
    for r in conf["ranks"][1:]:
        if [tuple(c) for c in r["collectives"]] != first:
            raise ValueError("ranks ran different exchanges")
    return first


def drop_words(run: dict) -> str:
    """How the dropped share falls with the capacity factor, from the values."""
    parts = []
    for conf in run["runs"]:
        load = expert_load(conf)
        share = sum(load["dropped"]) / sum(load["sent"])
        parts.append((conf["capacity_factor"], sum(load["dropped"]), share))
    text = "; ".join(f"at capacity factor {f:g}, {n} assignments dropped ({s:.0%})"
                     for f, n, s in parts)
    zero = [f for f, n, _ in parts if n == 0]
    if zero:
        text += (f". From capacity factor {min(zero):g} on, every expert had room for "
                 "all it was sent")
    else:
        text += ". Even the largest capacity factor tried dropped some"
    return text + "."


def load_figure(runs: dict[str, dict], title: str = ""):
    """Per expert, the assignments it was sent (all ranks together) and what it kept
    at each capacity factor; a line marks each factor's room (capacity x ranks)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 2.9),
                             squeeze=False, sharey=True)
    shades = ["#C44E52", "#DD8452", "#55A868", "#4C72B0"]
    for ax, (label, run) in zip(axes[0], runs.items()):
        experts = run["experts"]
        confs = run["runs"]
        sent = expert_load(confs[0])["sent"]
        ax.bar(range(experts), sent, 0.8, color="#C7C7C7", label="sent")
        width = 0.8 / len(confs)
        for i, conf in enumerate(confs):
            kept = expert_load(conf)["kept"]
            xs = [e - 0.4 + width * (i + 0.5) for e in range(experts)]
            color = shades[i % len(shades)]
            ax.bar(xs, kept, width * 0.9, color=color,
                   label=f"kept, factor {conf['capacity_factor']:g}")
            ax.axhline(conf["capacity"] * run["world"], color=color, lw=0.8, ls="--")
        ax.set_xticks(range(experts), [f"expert {e}" for e in range(experts)],
                      fontsize=8)
        ax.set_title(label, fontsize=9)
    axes[0][0].set_ylabel("token assignments")
    axes[0][-1].legend(fontsize=7, frameon=False, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
