"""The tensors a layer saved for backward (as the chapter's ``SavedTensors`` listed them:
layer, shape, dtype, bytes), sorted by what they are, so that a measured total can be set
beside the formula term by term. Sorting reads only the measured shapes."""
from __future__ import annotations

import math

__all__ = ["TERMS", "sort_saved"]

TERMS = ("s·b·h-sized", "attention scores", "norm statistics", "masks", "other")


def sort_saved(shapes, layer: str, seq: int, batch: int, width: int, heads: int
               ) -> dict[str, int]:
    """Bytes of ``layer``'s saved tensors by kind: whole multiples of s·b·h values
    (inputs of the norms, products and GELU), batch x heads x s x s values (attention
    scores), s·b values (a norm's mean and variance), boolean masks, anything else."""
    out = dict.fromkeys(TERMS, 0)
    for where, shape, dtype, nbytes in shapes:
        if where != layer:
            continue
        n = math.prod(shape)
        if "bool" in dtype:
            kind = "masks"
        elif n == batch * heads * seq * seq:
            kind = "attention scores"
        elif n % (seq * batch * width) == 0:
            kind = "s·b·h-sized"
        elif n == seq * batch:
            kind = "norm statistics"
        else:
            kind = "other"
        out[kind] += nbytes
    return out
