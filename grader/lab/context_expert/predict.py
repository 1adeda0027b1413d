"""The planner beside the runs: what :mod:`grader.lab.planner.context` and
:mod:`grader.lab.planner.experts` predict for the page's ring-attention and
mixture-of-experts runs, what the scripts recorded, the error, and the sentences.

Counted things (chunk pairs, bytes, capacities, drops from the recorded histogram) are
compared exactly. The ring's CPU time per rank is predicted from the pair counts, at a
time per pair taken from the same run's unmasked configuration (the median rank's CPU
time over its pairs), so the error says how well "every pair is the same work" explains
the causal runs; nothing here names a cause the page did not measure.
"""
from __future__ import annotations

import math
import statistics

from ..planner.context import RingAttention, predict_ring
from ..planner.experts import (MoE, buffer_bytes, capacity, dropped, dropped_even,
                               exchange_sent, expert_params_per_rank)

__all__ = ["ring_predictions", "ring_table", "ring_words", "moe_predictions",
           "moe_table", "moe_words", "count_words", "search_words"]


def _err(pred: float, meas: float | None) -> float | None:
    if meas is None or pred is None:
        return None
    if meas == 0:
        return 0.0 if pred == 0 else math.inf
    return (pred - meas) / meas


def ring_predictions(run: dict) -> list[dict]:
    """One row per configuration and rank: the planner's pairs, K/V bytes sent, memory
    held and CPU time, beside the run's (``sent_bytes`` is ``None`` in a run recorded
    before the scripts counted it)."""
    attn = RingAttention(run["seq"], run["heads"], run["head_dim"])
    world = run["world"]
    plain = next(c for c in run["runs"] if not c["causal"])
    per_pair = statistics.median(min(r["busy_s"]) / r["pairs"] for r in plain["ranks"])
    rows = []
    for conf in run["runs"]:
        pred = predict_ring(attn, world, conf["layout"], conf["causal"])
        for r in sorted(conf["ranks"], key=lambda r: r["rank"]):
            busy = min(r["busy_s"])
            p_busy = pred.pairs[r["rank"]] * per_pair
            rows.append({
                "layout": conf["layout"], "causal": conf["causal"], "rank": r["rank"],
                "pairs": (pred.pairs[r["rank"]], r["pairs"]),
                "sent": (pred.traffic.sent, r.get("sent_bytes")),
                "held": pred.held,
                "busy": (p_busy, busy),
                "error": {"pairs": _err(pred.pairs[r["rank"]], r["pairs"]),
                          "sent": _err(pred.traffic.sent, r.get("sent_bytes")),
                          "busy": _err(p_busy, busy) if conf["causal"] else None}})
    return rows


def _kib(n) -> str:
    return "not recorded" if n is None else f"{n / 1024:.0f}"


def _pct(e) -> str:
    if e is None:
        return ""
    return "0 %" if abs(e) < 0.005 else f"{100 * e:+.0f} %"


def ring_table(rows: list[dict]) -> str:
    """The rows as a text table (planner / recorded)."""
    head = (f"{'configuration':<20}{'rank':>5}{'pairs':>10}{'K/V sent KiB':>18}"
            f"{'held KiB':>10}{'CPU ms':>16}{'error':>8}")
    lines = [head, " " * 25 + f"{'plan/run':>10}{'plan/run':>18}{'plan':>10}"
             f"{'plan/run':>16}", "-" * len(head)]
    for r in rows:
        config = f"{r['layout']}, {'causal' if r['causal'] else 'no mask'}"
        (pp, mp), (ps, ms), (pb, mb) = r["pairs"], r["sent"], r["busy"]
        lines.append(f"{config:<20}{r['rank']:>5}{f'{pp}/{mp}':>10}"
                     f"{f'{_kib(ps)}/{_kib(ms)}':>18}{r['held'] / 1024:>10.0f}"
                     f"{f'{1e3 * pb:.1f}/{1e3 * mb:.1f}':>16}"
                     f"{_pct(r['error']['busy']):>8}")
    return "\n".join(lines)


def count_words(errors: list[float | None], what: str) -> str:
    """Whether counted predictions equal what the scripts recorded, in words."""
    known = [e for e in errors if e is not None]
    if not known:
        return f"the run did not record {what}, so the planner's figures stand alone"
    bad = [e for e in known if e != 0]
    if not bad:
        return f"the planner's {what} equal the recorded ones in all {len(known)} cases"
    return (f"the planner's {what} differ from the recorded ones in {len(bad)} of "
            f"{len(known)} cases (by up to {100 * max(abs(e) for e in bad):.0f} %)")


def ring_words(rows: list[dict]) -> str:
    """The sentence under the ring table, from its values."""
    pairs = count_words([r["error"]["pairs"] for r in rows], "chunk pairs")
    sent = count_words([r["error"]["sent"] for r in rows], "bytes sent")
    text = f"Counted, {pairs}, and {sent}. "
    errs = [r["error"]["busy"] for r in rows if r["error"]["busy"] is not None]
    if not errs:
        return text + "No causal run was timed."
    med = statistics.median(abs(e) for e in errs)
    worst = max(errs, key=abs)
    text += (f"Timed, the causal runs' CPU time per rank, predicted from the pairs at "
             f"the unmasked run's time per pair, is off by a median of {100 * med:.0f} % "
             f"and {100 * abs(worst):.0f} % at worst (the prediction "
             f"{'above' if worst > 0 else 'below'} the measurement)")
    if med <= 0.15:
        return text + ": counting pairs explains the causal work well here."
    return text + (": the planner counts every pair as the same work; the page has not "
                   "timed the pairs one by one, so it does not say what the rest is.")


def _moe_of(run: dict, conf: dict) -> MoE:
    return MoE(run["experts"], run["top_k"], conf["capacity_factor"])


def _op(name: str) -> str:
    return "all_gather" if name == "all_gather" else "all_to_all"


def moe_predictions(run: dict) -> list[dict]:
    """One row per capacity factor: capacity, buffer bytes, exchanges, bytes a rank
    sends per exchange, drops (from the recorded histogram, and for an even router) and
    expert parameters per rank, beside the run's."""
    world, tokens, width = run["world"], run["tokens_per_rank"], run["width"]
    rows = []
    for conf in run["runs"]:
        moe = _moe_of(run, conf)
        ranks = conf["ranks"]
        calls = [tuple(c) for c in ranks[0]["collectives"]]
        size = buffer_bytes(tokens, width, moe)
        hist = [r["sent"] for r in ranks]
        cap = capacity(tokens, moe)
        rec_dropped = sum(sum(r["sent"]) - sum(r["kept"]) for r in ranks)
        op = _op(calls[0][0]) if calls else "all_to_all"
        rows.append({
            "capacity_factor": conf["capacity_factor"],
            "capacity": (cap, conf["capacity"]),
            "buffer": (size, calls[0][1] if calls else None),
            "exchanges": (4, len(calls)),
            "op": op, "sent": exchange_sent(op, size, world),
            "dropped": (sum(dropped(hist, cap)), rec_dropped),
            "dropped_even": dropped_even(tokens, moe, world),
            "assignments": sum(sum(h) for h in hist),
            "busiest": max(sum(h[e] for h in hist) for e in range(run["experts"])),
            "even": tokens * run["top_k"] * world / run["experts"],
            "expert_params": expert_params_per_rank(moe, width, world) - width * moe.experts,
            "local_experts": moe.experts // world, "experts": moe.experts,
            "router_params": width * moe.experts,
            "error": {"capacity": _err(cap, conf["capacity"]),
                      "buffer": _err(size, calls[0][1] if calls else None),
                      "exchanges": _err(4, len(calls)),
                      "dropped": _err(sum(dropped(hist, cap)), rec_dropped)}})
    return rows


def moe_table(rows: list[dict]) -> str:
    head = (f"{'factor':>7}{'capacity':>11}{'buffer KiB':>13}{'exchanges':>11}"
            f"{'sent KiB':>10}{'dropped':>11}{'even router':>13}")
    lines = [head, f"{'':>7}{'plan/run':>11}{'plan/run':>13}{'plan/run':>11}{'plan':>10}"
             f"{'plan/run':>11}{'plan':>13}", "-" * len(head)]
    for r in rows:
        (pc, mc), (pb, mb), (pe, me), (pd, md) = (r["capacity"], r["buffer"],
                                                  r["exchanges"], r["dropped"])
        lines.append(f"{r['capacity_factor']:>7g}{f'{pc}/{mc}':>11}"
                     f"{f'{_kib(pb)}/{_kib(mb)}':>13}{f'{pe}/{me}':>11}"
                     f"{r['sent'] / 1024:>10.0f}{f'{pd}/{md}':>11}{r['dropped_even']:>13}")
    if rows:
        lines.append(f"experts' parameters per rank (plan): {rows[0]['expert_params']:,.0f}"
                     f" ({rows[0]['local_experts']} of {rows[0]['experts']} experts), and "
                     f"the router's {rows[0]['router_params']:,}")
    return "\n".join(lines)


def moe_words(rows: list[dict]) -> str:
    """The sentence under the mixture's table, from its values."""
    counted = [r["error"][k] for r in rows for k in ("capacity", "buffer", "exchanges")]
    drops = [r["error"]["dropped"] for r in rows]
    text = (f"For the mixture, counted, "
            f"{count_words(counted, 'capacities, buffer sizes and exchanges')}; "
            f"given the routing histogram the run recorded, "
            f"{count_words(drops, 'dropped assignments')}. ")
    off = [r for r in rows if r["dropped_even"] != r["dropped"][1]]
    if not off:
        return text + ("Without the histogram, assuming an even router, the planner "
                       "predicts the same drops: this router spread its tokens evenly "
                       "enough.")
    r = max(off, key=lambda r: abs(r["dropped"][1] - r["dropped_even"]))
    return text + (f"Without the histogram, assuming an even router, it predicts "
                   f"{r['dropped_even']} dropped at capacity factor "
                   f"{r['capacity_factor']:g} where {r['dropped'][1]} of "
                   f"{r['assignments']} were: the recorded histogram is uneven (the "
                   f"busiest expert was sent {r['busiest']} assignments, an even share "
                   f"is {r['even']:g}), so a planner without one "
                   f"{'under' if r['dropped_even'] < r['dropped'][1] else 'over'}"
                   "estimates the drops.")


def search_words(best, preds) -> str:
    """What :func:`~grader.lab.planner.mesh.mesh_search` chose, and what it refused, in
    words from its predictions."""
    gib = 2**30
    refused = [p for p in preds if not p.fits]
    if best is None:
        return (f"None of the {len(preds)} plans fits: the smallest needs "
                f"{min(p.memory for p in preds) / gib:.3g} GiB per device, more than "
                f"the {preds[0].capacity / gib:.3g} GiB each has.")
    text = (f"Of {len(preds)} plans the planner chooses {best.plan}: "
            f"{best.step_s:.3g} s per step predicted, {best.memory / gib:.3g} GiB per "
            "device")
    fits = [p for p in preds if p.fits]
    if len(fits) > 1:
        nxt = fits[1]
        gap = nxt.step_s / best.step_s - 1
        text += (f"; the next, {nxt.plan}, is " +
                 ("as fast within 0.1 %" if gap < 0.001 else f"{100 * gap:.1f} % slower"))
    text += ". "
    contig = [p for p in preds if p.plan.cp > 1 and p.plan.layout == "contiguous"]
    if contig and best.plan.cp > 1:
        twin = [p for p in contig if (p.plan.dp, p.plan.tp, p.plan.cp, p.plan.ep,
                                      p.plan.sp) == (best.plan.dp, best.plan.tp,
                                                     best.plan.cp, best.plan.ep,
                                                     best.plan.sp)]
        if twin:
            text += (f"The same plan with the contiguous split is "
                     f"{100 * (twin[0].step_s / best.step_s - 1):.0f} % slower (the planner "
                     "prices the busiest rank's share of the causal attention). ")
    if refused:
        text += (f"It refuses {len(refused)} for memory, for instance: "
                 f"{refused[0].refused}.")
    else:
        text += "Every plan fits."
    return text
