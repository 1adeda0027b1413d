"""Which collectives a plan needs: the layout table of tensor parallelism.

A layer's placement is ``"R"`` (weight whole on every rank of the tensor-parallel group),
``"col"`` (split by output features) or ``"row"`` (split by input features). Activations
between layers are ``"R"`` (whole), ``"S"`` (split by features) or ``"P"`` (partial sums,
after a row-split layer). ReLU cannot run on partial sums, so a ``"P"`` output is summed
before the next layer. The conversions::

    R -> S  free (each rank keeps its slice)     S -> R  all-gather
    P -> R  all-reduce                           P -> S  reduce-scatter

Gradients flow back through the same table. Data parallelism adds the all-reduce of the
weight gradients over the ``dp`` replicas: one fused all-reduce (``dp_sync="fused"``, as
DDP's buckets do) or one per weight (``"per_weight"``, as PyTorch's DTensor and Paddle's
semi-automatic API do in the optimizer step).
"""
from __future__ import annotations

from dataclasses import dataclass

from .collectives import ring_bytes

__all__ = ["PLACEMENTS", "NEEDS", "GIVES", "CONVERT", "Collective", "validate_plan", "comm_plan",
           "comm_bytes", "DP_SYNC"]

PLACEMENTS = ("R", "col", "row")
NEEDS = {"R": "R", "col": "R", "row": "S"}   # the input layout each placement needs
GIVES = {"R": "R", "col": "S", "row": "P"}   # the output layout it produces
CONVERT = {("R", "R"): None, ("S", "S"): None, ("R", "S"): None,
           ("S", "R"): "all_gather", ("P", "R"): "all_reduce", ("P", "S"): "reduce_scatter"}
# backward: the layout of dL/d(input) a placement produces, and the layout of
# dL/d(output) it needs
GRAD_GIVES = {"R": "R", "col": "P", "row": "S"}
GRAD_NEEDS = {"R": "R", "col": "S", "row": "R"}
DP_SYNC = ("fused", "per_weight")


@dataclass(frozen=True)
class Collective:
    """One collective of a step: what, where in the step, over which group (``"tp"`` or
    ``"dp"``) of ``ranks`` ranks, on a tensor of ``size`` bytes (full, unsplit size),
    sending ``sent`` bytes per rank."""

    op: str
    where: str
    ranks: int
    size: int
    sent: float
    group: str = "tp"


def validate_plan(dims, placements) -> None:
    if len(placements) != len(dims) - 1:
        raise ValueError(f"{len(dims) - 1} layers need {len(dims) - 1} placements, "
                         f"got {len(placements)}")
    bad = [p for p in placements if p not in PLACEMENTS]
    if bad:
        raise ValueError(f"unknown placement(s) {bad}: use {PLACEMENTS}")


def comm_plan(dims: list[int], placements, batch: int, tp: int = 2, dp: int = 1,
              itemsize: int = 4, dp_sync: str = "fused") -> list[Collective]:
    """Every collective of one training step, in order (forward, backward, then the
    data-parallel gradient all-reduce). ``dims = [in, hidden..., out]``; ``batch`` is the
    global batch, split over ``dp`` replicas."""
    placements = tuple(placements)
    validate_plan(dims, placements)
    if batch % dp:
        raise ValueError(f"batch {batch} does not split over dp={dp}")
    if dp_sync not in DP_SYNC:
        raise ValueError(f"dp_sync={dp_sync!r}: use one of {DP_SYNC}")
    b = batch // dp
    out: list[Collective] = []

    def add(op, where: str, numel: int) -> None:
        if op and tp > 1:
            size = numel * itemsize
            out.append(Collective(op, where, tp, size, ring_bytes(op, size, tp)))

    last = len(placements) - 1
    for k, pl in enumerate(placements):       # forward: to what the next layer needs
        need = NEEDS[placements[k + 1]] if k < last else "R"   # the loss needs R
        add(CONVERT[(GIVES[pl], need)], f"fwd after layer {k}", b * dims[k + 1])
    for k in range(last, -1, -1):              # backward: the gradient of layer k's output
        have = "R" if k == last else GRAD_GIVES[placements[k + 1]]
        op = None if have == "R" else CONVERT[(have, GRAD_NEEDS[placements[k]])]
        add(op, f"bwd into layer {k}", b * dims[k + 1])
    if dp > 1:
        shares = [dims[k] * dims[k + 1] // (tp if pl != "R" else 1)
                  for k, pl in enumerate(placements)]
        groups = [(sum(shares), "dp gradients")] if dp_sync == "fused" else \
            [(s, f"dp gradient of layer {k}") for k, s in enumerate(shares)]
        for numel, where in groups:
            size = numel * itemsize
            out.append(Collective("all_reduce", where, dp, size,
                                  ring_bytes("all_reduce", size, dp), group="dp"))
    return out


def comm_bytes(layer_shapes, placements, batch: int, dtype: str = "float32", tp: int = 2,
               dp: int = 1) -> float:
    """Bytes one rank sends in one training step (ring collectives).

    ``layer_shapes``: ``[(in, out), ...]`` of consecutive ``Linear`` layers. Example: a
    2-layer MLP split column-wise then row-wise over 2 ranks needs one all-reduce of the
    output forward and none backward:
    ``comm_bytes([(8, 16), (16, 4)], ["col", "row"], 32) == 2*(1/2)*32*4*4``.
    """
    itemsize = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}[dtype]
    dims = [layer_shapes[0][0]] + [o for _, o in layer_shapes]
    for (i, _), (_, o_prev) in zip(layer_shapes[1:], layer_shapes[:-1]):
        if i != o_prev:
            raise ValueError(f"layer shapes do not chain: {layer_shapes}")
    return sum(c.sent for c in comm_plan(dims, placements, batch, tp, dp, itemsize))
