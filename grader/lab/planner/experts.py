"""Expert parallelism in the planner: a mixture-of-experts layer over ``ep`` ranks
(GShard, Lepikhin et al. 2021; Switch, Fedus et al. 2022), as the context-and-expert
chapter (chapters/context_expert.md) runs it by hand.

A :class:`MoE` replaces a block's MLP by ``experts`` MLPs of the same shape (``width`` to
``hidden`` to ``width``, with biases) and a bias-free router (``width x experts``); each
token goes to its ``top_k`` experts. Each of ``ep`` ranks holds ``experts / ep`` of them
(:func:`expert_params_per_rank`) and its own tokens. An expert takes at most

    capacity = ceil(capacity_factor x tokens_per_rank x top_k / experts)

tokens from each rank (:func:`capacity`); what a rank sent it beyond that is dropped
(:func:`dropped`, from a routing histogram: what each rank sent each expert; or, with
no histogram, :func:`dropped_even` for a router that spreads evenly). Each rank fills a
dispatch buffer of ``experts x capacity`` slots of ``width`` values (padding included,
whatever the router chose: :func:`buffer_bytes`), and one all-to-all sends expert
``e``'s slots to ``e``'s rank; a second brings the outputs back (combine), and the
backward pass runs both again (:func:`exchanges`): four per MoE layer and step. In an
all-to-all over ``ep`` ranks a rank keeps its own share and sends ``(ep - 1) / ep`` of
the buffer; the stand-in the Paddle page runs where ``alltoall`` is missing, an
all-gather of the whole buffer, sends ``ep - 1`` times it on a ring.

The experts compute on every slot, filled or not: ``experts x capacity`` slots per rank,
about ``capacity_factor x top_k`` per token (:func:`expert_slots`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["MoE", "capacity", "expert_params", "expert_params_per_rank", "buffer_bytes",
           "exchanges", "exchange_sent", "all_to_all_time", "dropped", "dropped_even",
           "expert_slots"]

EXCHANGE_OPS = ("all_to_all", "all_gather")


@dataclass(frozen=True)
class MoE:
    experts: int
    top_k: int = 2
    capacity_factor: float = 1.0
    hidden: int | None = None          # None: 4 x width, a transformer's MLP

    def __post_init__(self) -> None:
        if self.experts < 1 or not 1 <= self.top_k <= self.experts:
            raise ValueError(f"need 1 <= top_k <= experts: top_k={self.top_k}, "
                             f"experts={self.experts}")
        if self.capacity_factor <= 0:
            raise ValueError(f"a capacity factor is positive, not {self.capacity_factor}")

    def hidden_of(self, width: int) -> int:
        return 4 * width if self.hidden is None else self.hidden

    def __str__(self) -> str:
        return (f"{self.experts} experts, top-{self.top_k}, capacity factor "
                f"{self.capacity_factor:g}")


def capacity(tokens_per_rank: int, moe: MoE) -> int:
    """Slots each expert keeps for each rank's tokens."""
    return math.ceil(moe.capacity_factor * tokens_per_rank * moe.top_k / moe.experts)


def expert_params(moe: MoE, width: int) -> int:
    """Parameters of one expert: two linears with their biases."""
    h = moe.hidden_of(width)
    return 2 * width * h + h + width


def expert_params_per_rank(moe: MoE, width: int, ep: int, tp: int = 1) -> float:
    """Parameters of the experts one rank holds (``experts / ep`` of them, each split
    ``1 / tp`` as Megatron splits an MLP, the second bias whole) and of the router."""
    if moe.experts % ep:
        raise ValueError(f"{moe.experts} experts do not split over ep={ep} ranks")
    h = moe.hidden_of(width)
    one = (2 * width * h + h) / tp + width
    return moe.experts // ep * one + width * moe.experts


def buffer_bytes(tokens_per_rank: int, width: int, moe: MoE, itemsize: int = 4) -> int:
    """Bytes of one rank's dispatch (and combine) buffer: ``experts x capacity`` slots."""
    return moe.experts * capacity(tokens_per_rank, moe) * width * itemsize


def exchange_sent(op: str, buffer: float, ep: int) -> float:
    """Bytes one rank sends in one exchange of a ``buffer``-byte buffer over ``ep`` ranks:
    an all-to-all sends all but its own share; an all-gather on a ring sends ``ep - 1``
    whole buffers (every other rank's passes through)."""
    if op not in EXCHANGE_OPS:
        raise ValueError(f"exchange {op!r}: use one of {EXCHANGE_OPS}")
    if ep <= 1:
        return 0.0
    return (ep - 1) / ep * buffer if op == "all_to_all" else (ep - 1) * buffer


def exchanges(tokens_per_rank: int, width: int, moe: MoE, ep: int, itemsize: int = 4,
              op: str = "all_to_all") -> list[tuple[str, str, int, float]]:
    """The exchanges of one MoE layer in one training step on one rank: (phase, what,
    buffer bytes, bytes sent): dispatch and combine forward, then backward the combine's
    gradient and the dispatch's."""
    size = buffer_bytes(tokens_per_rank, width, moe, itemsize)
    sent = exchange_sent(op, size, ep)
    return [("forward", "dispatch", size, sent), ("forward", "combine", size, sent),
            ("backward", "combine", size, sent), ("backward", "dispatch", size, sent)]


def all_to_all_time(buffer: float, ep: int, bandwidth: float, latency: float) -> float:
    """An all-to-all priced as ``ep - 1`` pairwise steps: latency each, and the bytes a
    rank sends at its link's bandwidth."""
    if ep <= 1:
        return 0.0
    return (ep - 1) * latency + exchange_sent("all_to_all", buffer, ep) / bandwidth


def dropped(sent_by_rank: list[list[int]], cap: int) -> list[int]:
    """Assignments each expert drops, given what each rank sent it (a routing histogram,
    ``[rank][expert]``) and the capacity per rank."""
    if not sent_by_rank:
        raise ValueError("a routing histogram has one row per rank")
    experts = len(sent_by_rank[0])
    if any(len(row) != experts for row in sent_by_rank):
        raise ValueError("every rank's row of the histogram names every expert")
    return [sum(max(0, row[e] - cap) for row in sent_by_rank) for e in range(experts)]


def dropped_even(tokens_per_rank: int, moe: MoE, ep: int = 1) -> int:
    """Assignments dropped, all ranks together, by a router that sends every expert an
    even share of each rank's ``top_k x tokens`` (the planner's assumption when it has
    no histogram): none from a capacity factor of 1 on."""
    share = tokens_per_rank * moe.top_k / moe.experts
    cap = capacity(tokens_per_rank, moe)
    return round(max(0.0, share - cap) * moe.experts * ep)


def expert_slots(tokens_per_rank: int, moe: MoE) -> int:
    """Slots the experts compute per rank and layer: every slot of the buffer."""
    return moe.experts * capacity(tokens_per_rank, moe)
