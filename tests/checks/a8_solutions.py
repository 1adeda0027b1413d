"""Submissions for assignment 8: the reference, other correct ones and typical wrong ones."""
from grader.lab import planner

NEEDS = {"R": "R", "col": "R", "row": "S"}
GIVES = {"R": "R", "col": "S", "row": "P"}
CONVERT = {("S", "R"): "all_gather", ("P", "R"): "all_reduce", ("P", "S"): "reduce_scatter"}


def predict_reference(dims, placements, batch, tp=2, dp=1):
    """Walk the layers forward, then backward, with the layout table; then the dp all-reduce."""
    b, out = batch // dp, []
    if tp > 1:
        for k, pl in enumerate(placements):
            need = NEEDS[placements[k + 1]] if k + 1 < len(placements) else "R"
            op = CONVERT.get((GIVES[pl], need))
            if op:
                out.append((op, "fwd", b * dims[k + 1] * 4))
        grad_in = {"R": "R", "col": "P", "row": "S"}
        grad_need = {"R": "R", "col": "S", "row": "R"}
        for k in reversed(range(len(placements))):
            have = "R" if k == len(placements) - 1 else grad_in[placements[k + 1]]
            op = CONVERT.get((have, grad_need[placements[k]]))
            if op:
                out.append((op, "bwd", b * dims[k + 1] * 4))
    if dp > 1:
        params = sum(dims[k] * dims[k + 1] // (1 if pl == "R" else tp) for k, pl in enumerate(placements))
        out.append(("all_reduce", "dp", params * 4))
    return out


def predict_by_pairs(dims, placements, batch, tp=2, dp=1):
    """Another correct one: reasons about each boundary between two layers directly."""
    rows, f32, out = batch // dp, 4, []
    if tp > 1:
        padded = list(placements) + ["loss"]
        for k in range(len(placements)):
            a, nxt = padded[k], padded[k + 1]
            width = dims[k + 1] * rows * f32
            if a == "col" and nxt in ("R", "col", "loss"):
                out.append(("all_gather", "fwd", width))          # S -> R
            if a == "row" and nxt in ("R", "col", "loss"):
                out.append(("all_reduce", "fwd", width))          # P -> R
            if a == "row" and nxt == "row":
                out.append(("reduce_scatter", "fwd", width))      # P -> S
            # backward through the same boundary
            if nxt == "col" and a in ("R", "row"):
                out.append(("all_reduce", "bwd", width))          # P -> R
            if nxt == "col" and a == "col":
                out.append(("reduce_scatter", "bwd", width))      # P -> S
            if nxt == "row" and a in ("R", "row"):
                out.append(("all_gather", "bwd", width))          # S -> R
    if dp > 1:
        weights = [dims[k] * dims[k + 1] / (tp if p != "R" else 1) for k, p in enumerate(placements)]
        out.append(("all_reduce", "dp", int(sum(weights)) * f32))
    return out


def choose_by_search(dims, batch, cluster):
    """Predict every valid strategy with the cost model; keep the fastest."""
    best = None
    for s in planner.enumerate_strategies(dims, batch, cluster.n):
        t = planner.predict(dims, batch, s, cluster).step_s
        if best is None or t < best[0]:
            best = (t, s)
    return best[1].dp, best[1].tp, best[1].placements


def choose_by_rule(dims, batch, cluster):
    """Another correct one: a rule of thumb derived from the predictions by hand."""
    weights = sum(a * b for a, b in zip(dims, dims[1:])) * 4
    activations = batch * dims[-1] * 4
    if batch <= 64:
        return 1, 2, ("R", "R")                       # too little work to pay for any message
    if activations < weights:
        return 1, 2, ("col", "row")                   # the output is smaller than the weights
    return 2, 1, ("R", "R")


# ---- typical wrong answers -------------------------------------------------------------

def predict_elements(dims, placements, batch, tp=2, dp=1):
    """Sizes in elements, not bytes."""
    return [(op, ph, size // 4) for op, ph, size in predict_reference(dims, placements, batch, tp, dp)]


def predict_forward_only(dims, placements, batch, tp=2, dp=1):
    """Forgets that the backward pass communicates."""
    return [e for e in predict_reference(dims, placements, batch, tp, dp) if e[1] != "bwd"]


def predict_shard_sizes(dims, placements, batch, tp=2, dp=1):
    """Gives one rank's shard instead of the full tensor."""
    return [(op, ph, size // (tp if ph != "dp" else 1))
            for op, ph, size in predict_reference(dims, placements, batch, tp, dp)]


def choose_always_dp(dims, batch, cluster):
    return 2, 1, ("R", "R")


def choose_invalid(dims, batch, cluster):
    return 2, 2, ("col", "row")
