"""Submissions for assignment 8: correct ones written in different ways, and typical wrong
ones. Each function is self-contained, as a notebook answer cell would be (the sample
submissions are written from these)."""


def links_by_collectives(dims, placements, batch, tp=2, dp=1, order="tp"):
    """List the step's collectives with their group kind, then walk every ring."""
    needs = {"R": "R", "col": "R", "row": "S"}
    gives = {"R": "R", "col": "S", "row": "P"}
    back_gives = {"R": "R", "col": "P", "row": "S"}
    back_needs = {"R": "R", "col": "S", "row": "R"}
    ops = {("S", "R"): 1, ("P", "R"): 2, ("P", "S"): 1}   # ring passes of n
    b, L = batch // dp, len(placements)
    coll = []
    for k in range(L):
        nxt = needs[placements[k + 1]] if k < L - 1 else "R"
        if (gives[placements[k]], nxt) in ops:
            coll.append(("tp", ops[gives[placements[k]], nxt], b * dims[k + 1] * 4))
    for k in range(L - 1, -1, -1):
        have = back_gives[placements[k + 1]] if k < L - 1 else "R"
        if (have, back_needs[placements[k]]) in ops:
            coll.append(("tp", ops[have, back_needs[placements[k]]], b * dims[k + 1] * 4))
    held = sum(dims[k] * dims[k + 1] // (tp if pl != "R" else 1) for k, pl in enumerate(placements))
    coll.append(("dp", 2, held * 4))
    links = {}
    for kind, passes, n in coll:
        size = tp if kind == "tp" else dp
        for other in range(dp if kind == "tp" else tp):
            ring = []
            for j in range(size):
                d, t = (other, j) if kind == "tp" else (j, other)
                ring.append(d * tp + t if order == "tp" else t * dp + d)
            for j in range(size if size > 1 else 0):
                key = (ring[j], ring[(j + 1) % size])
                links[key] = links.get(key, 0) + passes * (size - 1) / size * n
    return links


def links_per_rank(dims, placements, batch, tp=2, dp=1, order="tp"):
    """Per rank: its tp bytes and its dp bytes, each sent to its successor in that group."""
    layout_after = {"R": "R", "col": "S", "row": "P"}
    layout_before = {"R": "R", "col": "R", "row": "S"}
    grad_after = {"R": "R", "col": "P", "row": "S"}
    grad_before = {"R": "R", "col": "S", "row": "R"}

    def passes(have, need):          # all_reduce: 2 ring passes; all_gather, reduce_scatter: 1
        return {("P", "R"): 2, ("S", "R"): 1, ("P", "S"): 1}.get((have, need), 0)

    rows = batch // dp
    tp_bytes = 0.0
    for k, pl in enumerate(placements):
        last = k == len(placements) - 1
        n = rows * dims[k + 1] * 4
        fwd = passes(layout_after[pl], "R" if last else layout_before[placements[k + 1]])
        bwd = passes("R" if last else grad_after[placements[k + 1]], grad_before[pl])
        tp_bytes += (fwd + bwd) * (tp - 1) / tp * n
    grads = sum(i * o * 4 / (1 if pl == "R" else tp)
                for i, o, pl in zip(dims[:-1], dims[1:], placements))
    dp_bytes = 2 * (dp - 1) / dp * grads
    where = {}                       # rank -> (d, t)
    for d in range(dp):
        for t in range(tp):
            where[d * tp + t if order == "tp" else t * dp + d] = (d, t)
    rank_of = {v: k for k, v in where.items()}
    out = {}
    for r, (d, t) in where.items():
        if tp > 1 and tp_bytes:
            out[r, rank_of[d, (t + 1) % tp]] = out.get((r, rank_of[d, (t + 1) % tp]), 0) + tp_bytes
        if dp > 1:
            out[r, rank_of[(d + 1) % dp, t]] = out.get((r, rank_of[(d + 1) % dp, t]), 0) + dp_bytes
    return out


def order_by_counting(dims, placements, batch, tp, dp, per_node):
    cross = {}
    for order in ("tp", "dp"):
        links = links_by_collectives(dims, placements, batch, tp, dp, order)
        cross[order] = sum(v for (s, d), v in links.items() if s // per_node != d // per_node)
    return "dp" if cross["dp"] < cross["tp"] else "tp"


def order_by_group_traffic(dims, placements, batch, tp, dp, per_node):
    """Count, for each order, the ring links of each group kind that leave a node."""
    links_tp = links_per_rank(dims, placements, batch, tp, dp, "tp")
    links_dp = links_per_rank(dims, placements, batch, tp, dp, "dp")
    between = [sum(b for (s, d), b in links.items() if s // per_node != d // per_node)
               for links in (links_tp, links_dp)]
    return "dp" if between[1] < between[0] else "tp"


# ---- typical wrong answers -------------------------------------------------------------


def links_forward_only(dims, placements, batch, tp=2, dp=1, order="tp"):
    """Forgets that the backward pass converts layouts too."""
    needs = {"R": "R", "col": "R", "row": "S"}
    gives = {"R": "R", "col": "S", "row": "P"}
    passes = {("S", "R"): 1, ("P", "R"): 2, ("P", "S"): 1}
    coll = []
    for k, pl in enumerate(placements):
        need = needs[placements[k + 1]] if k + 1 < len(placements) else "R"
        if (gives[pl], need) in passes:
            coll.append(("tp", passes[gives[pl], need], batch // dp * dims[k + 1] * 4))
    held = sum(dims[k] * dims[k + 1] // (1 if pl == "R" else tp) for k, pl in enumerate(placements))
    coll.append(("dp", 2, held * 4))
    rank = (lambda d, t: d * tp + t) if order == "tp" else (lambda d, t: t * dp + d)
    out = {}
    for kind, m, n in coll:
        rings = ([[rank(d, t) for t in range(tp)] for d in range(dp)] if kind == "tp"
                 else [[rank(d, t) for d in range(dp)] for t in range(tp)])
        for ring in rings:
            p = len(ring)
            for i in range(p if p > 1 else 0):
                out[ring[i], ring[(i + 1) % p]] = out.get((ring[i], ring[(i + 1) % p]), 0) + m * (p - 1) / p * n
    return out


def links_unsharded_dp(dims, placements, batch, tp=2, dp=1, order="tp"):
    """The dp all-reduce of every layer's whole weight, as if nothing were sharded."""
    base = links_by_collectives(dims, placements, batch, tp, dp, order)
    if dp < 2:
        return base
    full = sum(dims[k] * dims[k + 1] for k in range(len(placements))) * 4
    held = sum(dims[k] * dims[k + 1] // (1 if pl == "R" else tp) for k, pl in enumerate(placements)) * 4
    rank = (lambda d, t: d * tp + t) if order == "tp" else (lambda d, t: t * dp + d)
    for t in range(tp):
        ring = [rank(d, t) for d in range(dp)]
        for i in range(dp):
            base[ring[i], ring[(i + 1) % dp]] += 2 * (dp - 1) / dp * (full - held)
    return base


def links_whole_tensor(dims, placements, batch, tp=2, dp=1, order="tp"):
    """Each rank sends the whole tensor to its neighbour (n bytes per ring pass), not the
    ring's share of it."""
    needs = {"R": "R", "col": "R", "row": "S"}
    gives = {"R": "R", "col": "S", "row": "P"}
    back_gives = {"R": "R", "col": "P", "row": "S"}
    back_needs = {"R": "R", "col": "S", "row": "R"}
    passes = {("S", "R"): 1, ("P", "R"): 2, ("P", "S"): 1}
    rows, L = batch // dp, len(placements)
    tp_bytes = 0
    for k in range(L):
        nxt = needs[placements[k + 1]] if k < L - 1 else "R"
        back = back_gives[placements[k + 1]] if k < L - 1 else "R"
        m = passes.get((gives[placements[k]], nxt), 0) + passes.get((back, back_needs[placements[k]]), 0)
        tp_bytes += m * rows * dims[k + 1] * 4
    dp_bytes = 2 * 4 * sum(dims[k] * dims[k + 1] // (1 if pl == "R" else tp)
                           for k, pl in enumerate(placements))
    rank = (lambda d, t: d * tp + t) if order == "tp" else (lambda d, t: t * dp + d)
    out = {}
    for d in range(dp):
        for t in range(tp):
            if tp > 1 and tp_bytes:
                out[rank(d, t), rank(d, (t + 1) % tp)] = tp_bytes
            if dp > 1:
                out[rank(d, t), rank((d + 1) % dp, t)] = dp_bytes
    return out


def order_always_tp(dims, placements, batch, tp, dp, per_node):
    """Megatron's rule of thumb, whatever the batch: tp groups inside the node."""
    return "tp"


def order_forward_only(dims, placements, batch, tp, dp, per_node):
    cross = {}
    for order in ("tp", "dp"):
        links = links_forward_only(dims, placements, batch, tp, dp, order)
        cross[order] = sum(v for (s, d), v in links.items() if s // per_node != d // per_node)
    return "dp" if cross["dp"] < cross["tp"] else "tp"


def order_invalid(dims, placements, batch, tp, dp, per_node):
    return "model"
