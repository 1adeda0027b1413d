"""Context parallelism in the planner: ring attention over ``cp`` ranks (Liu et al. 2023),
as the context-and-expert chapter (chapters/context_expert.md) runs it by hand.

The sequence of ``seq`` tokens is cut into ``2 cp`` chunks of ``c = seq / 2cp`` tokens;
each rank keeps the queries of two chunks and starts with their keys and values
(:func:`chunks_of`: ``contiguous`` gives rank ``r`` chunks ``2r, 2r + 1``, ``zigzag``
chunks ``r, 2cp - 1 - r``). At each of ``cp`` steps a rank computes its queries against
the key/value block it holds and passes that block on, so that in a forward pass it
sends ``cp - 1`` blocks and receives as many (:func:`ring_traffic`). A block is the keys
and values of one rank's two chunks: ``2 x batch x heads x 2c x head_dim`` values.

Work: a chunk pair (one query chunk against one key chunk) is the unit; without a mask
a rank computes ``4 cp`` of them, under a causal mask only the pairs whose keys are not
all later than the queries (:func:`ring_pairs`). The busiest rank's pairs over the mean
rank's (:func:`causal_imbalance`) stretch the attention core of a causal step.

Memory: what the ring holds on a rank (:func:`ring_memory`): its queries, its own
key/value block and the one arriving, its two outputs with their log-sum-exp, and the
scores of one chunk pair at a time, where attention over the whole sequence on one
rank holds a ``seq x seq`` score matrix per head. In a training step, everything
autograd keeps per token is split by ``cp`` (each rank keeps its tokens; the attention
weights of its queries against all keys are ``1 / cp`` of them):
:func:`~.mesh.predict_mesh` divides the activations by ``cp``.

A training step's backward pass sends the key/value blocks round again and, with them,
the gradients of the keys and values (Liu et al.'s backward): ``2 (cp - 1)`` blocks
more per attention layer (:func:`step_blocks`).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LAYOUTS", "RingAttention", "RingPrediction", "chunks_of", "ring_pairs",
           "causal_imbalance", "ring_traffic", "ring_memory", "predict_ring", "step_blocks"]

LAYOUTS = ("contiguous", "zigzag")


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: use one of {LAYOUTS}")


def chunks_of(rank: int, cp: int, layout: str) -> list[int]:
    """The two chunk numbers (of ``2 cp``) whose queries and keys ``rank`` holds."""
    _check_layout(layout)
    if not 0 <= rank < cp:
        raise ValueError(f"rank {rank} is not one of {cp} ranks")
    return [2 * rank, 2 * rank + 1] if layout == "contiguous" else [rank, 2 * cp - 1 - rank]


def ring_pairs(cp: int, layout: str = "zigzag", causal: bool = True) -> list[int]:
    """Chunk pairs each rank computes in one pass of the ring: all ``4 cp`` without a
    mask; under a causal mask, the pairs whose key chunk is not after the query chunk."""
    if cp < 1:
        raise ValueError(f"cp is at least 1, not {cp}")
    every = [c for r in range(cp) for c in chunks_of(r, cp, layout)]
    return [sum(1 for q in chunks_of(r, cp, layout) for k in every
                if not causal or k <= q) for r in range(cp)]


def causal_imbalance(cp: int, layout: str = "zigzag", causal: bool = True) -> float:
    """The busiest rank's chunk pairs over the mean rank's: how much longer than an
    even share the attention core of a step takes (1: even)."""
    pairs = ring_pairs(cp, layout, causal)
    return max(pairs) * len(pairs) / sum(pairs)


@dataclass(frozen=True)
class RingAttention:
    """One attention layer's sizes: ``batch`` sequences of ``seq`` tokens, ``heads``
    heads of ``head_dim``, ``itemsize`` bytes per value."""

    seq: int
    heads: int
    head_dim: int
    batch: int = 1
    itemsize: int = 4

    def chunk(self, cp: int) -> int:
        if self.seq % (2 * cp):
            raise ValueError(f"{self.seq} tokens do not cut into 2 x cp = {2 * cp} chunks: "
                             "choose a cp for which 2 cp divides the sequence")
        return self.seq // (2 * cp)

    def block_bytes(self, cp: int) -> int:
        """Keys and values of one rank's two chunks: the block that travels."""
        return 2 * self.batch * self.heads * 2 * self.chunk(cp) * self.head_dim * \
            self.itemsize


@dataclass(frozen=True)
class RingTraffic:
    steps: int          # transfers a rank makes in one pass (each way)
    block: int          # bytes of one transfer
    sent: int           # bytes a rank sends in one pass
    received: int


def ring_traffic(attn: RingAttention, cp: int) -> RingTraffic:
    """Bytes one rank sends (and receives) in one forward pass of the ring: ``cp - 1``
    blocks each way."""
    block = attn.block_bytes(cp)
    steps = cp - 1
    return RingTraffic(steps, block, steps * block, steps * block)


def step_blocks(cp: int) -> int:
    """Blocks one rank sends per attention layer in a training step: ``cp - 1`` forward,
    and ``2 (cp - 1)`` backward (the keys and values again, and their gradients)."""
    return 3 * (cp - 1)


def ring_memory(attn: RingAttention, cp: int) -> dict[str, int]:
    """Bytes the ring holds on one rank during a forward pass, by kind. ``cp = 1`` is
    attention over the whole sequence on one rank: its score matrix is ``seq x seq``."""
    b, a, d, it = attn.batch, attn.heads, attn.head_dim, attn.itemsize
    if cp == 1:
        s = attn.seq
        return {"queries": b * a * s * d * it, "keys and values": 2 * b * a * s * d * it,
                "outputs": b * a * s * (d + 1) * it, "scores": b * a * s * s * it}
    c = attn.chunk(cp)
    return {"queries": b * a * 2 * c * d * it,
            "keys and values": 2 * attn.block_bytes(cp),     # its own and the arriving
            "outputs": b * a * 2 * c * (d + 1) * it,          # two chunks' outputs, lse
            "scores": b * a * c * c * it}                     # one chunk pair at a time


@dataclass
class RingPrediction:
    cp: int
    layout: str
    causal: bool
    pairs: list[int]
    traffic: RingTraffic
    memory: dict[str, int]

    @property
    def imbalance(self) -> float:
        return max(self.pairs) * len(self.pairs) / sum(self.pairs)

    @property
    def held(self) -> int:
        return sum(self.memory.values())


def predict_ring(attn: RingAttention, cp: int, layout: str = "zigzag",
                 causal: bool = True) -> RingPrediction:
    """Work, bytes and memory of one rank in one pass of ring attention."""
    return RingPrediction(cp, layout, causal, ring_pairs(cp, layout, causal),
                          ring_traffic(attn, cp), ring_memory(attn, cp))
