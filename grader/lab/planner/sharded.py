"""The planner grows: memory per rank, ZeRO's stages and pipeline bubbles, for a
GPT-style transformer (the sharding chapter's model family).

A :class:`Transformer` is described by its sizes; a :class:`Plan` by its degrees:
``dp`` data-parallel ranks (of which ``replicas`` groups hold whole copies when ZeRO-3
shards inside each group: the 2-D "HSDP" mesh), ``tp`` tensor-parallel ranks per block
(Megatron's column-then-row split), ``pp`` pipeline stages with ``micro`` micro-batches,
and ``zero`` the ZeRO stage over the data-parallel ranks. :func:`predict_plan` prices
one plan on a :class:`~.cluster.Cluster`; :func:`plan_search` tries them all.

Memory per rank (bytes), as the chapter's mechanisms hold it at the peak of a step:

- ``params``: whole (``zero`` 0, 1); ZeRO-2 as ``fully_shard(reshard_after_forward=
  False)`` holds the shards *and* the whole gathered model from forward to backward
  (``P + P/dp``); ZeRO-3 holds the shards and, gathered, the unit computing and the one
  fetched ahead (``P/dp + 2 (1 - 1/dp) U``, ``U`` the largest unit, a block);
- ``grads``: whole, or ``1/dp`` from ZeRO-2 on; ``optimizer``: ``opt_states`` values per
  parameter (2 for Adam), ``1/dp`` of them from ZeRO-1 on;
- ``activations``: what autograd keeps per token (:meth:`Transformer.activation_bytes`)
  times the tokens in flight: this rank's micro-batches still waiting for their backward
  (GPipe: all ``micro``; 1F1B: at most ``pp``, the first stage's count).

Time per step: compute (``6 x parameters + 12 x seq x width x blocks`` FLOPs per token,
the attention's products included) stretched by the pipeline bubble, ``(m + p - 1) / m``;
the collectives of each stage over the data-parallel ranks, one per unit for the
sharded stages (ring alpha-beta, :mod:`.collectives`); Megatron's four all-reduces of
activations per block and micro-batch over ``tp``; two point-to-point transfers per
micro-batch and stage boundary; the cluster's overhead. Nothing overlaps.

A plan may also name the schedules of :mod:`.schedules` (interleaved 1F1B, ZB-H1 and
PyTorch's zero-bubble schedules): their bubble stretches the compute, their first
rank's micro-batches in flight set the activations, and ``v`` stages per rank send
``v`` times the transfers. :func:`plans_for` still tries GPipe and 1F1B only.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from . import schedules as S
from .cluster import Cluster
from .collectives import collective_time, ring_bytes
from .rates import compute_rate, precision_of

__all__ = ["Transformer", "Plan", "PlanPrediction", "predict_plan", "plan_search",
           "plans_for", "step_collectives", "bubble_fraction", "SCHEDULES"]

SCHEDULES = ("GPipe", "1F1B")


@dataclass(frozen=True)
class Transformer:
    """Sizes of a GPT-style model: embedding, ``blocks`` pre-norm blocks (bias-free
    q/k/v product, output projection, a 4x-wide MLP, two LayerNorms), final norm, head.
    ``batch`` sequences of ``seq`` tokens per step; ``itemsize`` bytes per value."""

    vocab: int
    width: int
    heads: int
    blocks: int
    seq: int
    batch: int
    itemsize: int = 4
    opt_states: int = 2

    def __post_init__(self) -> None:
        sizes = {"vocab": self.vocab, "width": self.width, "heads": self.heads,
                 "blocks": self.blocks, "seq": self.seq, "batch": self.batch,
                 "itemsize": self.itemsize, "opt_states": self.opt_states}
        bad = [f"{k}={v!r}" for k, v in sizes.items()
               if not isinstance(v, int) or v < (0 if k == "opt_states" else 1)]
        if bad:
            raise ValueError("a transformer's sizes are whole numbers of at least 1 "
                             f"(opt_states at least 0): {', '.join(bad)}")
        if self.width % self.heads:
            raise ValueError(f"width {self.width} does not split into {self.heads} heads: "
                             "choose a width that is a multiple of heads")

    @property
    def block_params(self) -> int:
        w = self.width
        return 12 * w * w + 10 * w      # qkv 3w^2, proj w^2+w, MLP 8w^2+5w, norms 4w

    @property
    def embed_params(self) -> int:
        return self.vocab * self.width

    @property
    def head_params(self) -> int:
        return self.width * self.vocab + self.vocab + 2 * self.width  # + final norm

    @property
    def params(self) -> int:
        return self.blocks * self.block_params + self.embed_params + self.head_params

    def flops_per_token(self) -> float:
        """Forward and backward: 2 per weight and token forward, twice that backward,
        and the attention's two products over the sequence."""
        matmul = self.params - self.embed_params        # an embedding is a lookup
        return 6 * matmul + 12 * self.seq * self.width * self.blocks

    def activation_bytes(self, tp: int = 1) -> tuple[float, float]:
        """Bytes autograd keeps per token: (per block, embedding and head). A block
        keeps its inputs to the two norms, the four products and the GELU (about 15
        widths; the MLP's 4x-wide ones dominate) and the attention scores before and
        after softmax (2 x heads x seq); under tensor parallelism the split ones
        (10 widths and the scores) shrink by ``tp``. The head keeps its logits and
        their log-softmax, and the final norm's input."""
        w, s, a = self.width, self.seq, self.heads
        block = 5 * w + (10 * w + 2 * a * s) / tp
        return block * self.itemsize, (2 * self.vocab + 2 * w) * self.itemsize


@dataclass(frozen=True)
class Plan:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0
    micro: int = 1
    schedule: str = "1F1B"
    replicas: int = 1            # ZeRO-3 inside dp/replicas ranks, DP across replicas

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def shard(self) -> int:
        """Ranks each ZeRO group shards over."""
        return self.dp // self.replicas

    def __str__(self) -> str:
        parts = []
        if self.dp > 1:
            if self.replicas > 1:
                parts.append(f"{self.replicas} x ZeRO-3 over {self.shard}")
            else:
                parts.append(f"ZeRO-{self.zero} x{self.dp}" if self.zero else
                             f"DP x{self.dp}")
        if self.tp > 1:
            parts.append(f"TP x{self.tp}")
        if self.pp > 1:
            parts.append(f"PP x{self.pp} ({self.schedule}, {self.micro} micro)")
        return " + ".join(parts) or "1 device"


@dataclass
class PlanPrediction:
    plan: Plan
    terms: dict[str, float]                  # seconds per step, by source
    memory_terms: dict[str, float]           # bytes on the busiest rank, by kind
    sent: float                              # bytes one rank sends per step
    fits: bool

    @property
    def step_s(self) -> float:
        return sum(self.terms.values())

    @property
    def memory(self) -> float:
        return sum(self.memory_terms.values())


def bubble_fraction(pp: int, micro: int) -> float:
    """The idle share of a pipeline step with equal stages and free transfers:
    ``(p - 1) / (m + p - 1)`` (GPipe and 1F1B alike)."""
    return (pp - 1) / (micro + pp - 1)


def _check(model: Transformer, plan: Plan) -> None:
    problems = []
    if plan.zero not in (0, 1, 2, 3):
        problems.append(f"ZeRO has stages 0 (none) to 3, not {plan.zero!r}")
    elif plan.zero and plan.dp == 1:
        problems.append(f"ZeRO-{plan.zero} needs data-parallel ranks (dp > 1)")
    if plan.replicas > 1 and (plan.zero != 3 or plan.dp % plan.replicas):
        problems.append("replicas split the data-parallel ranks of a ZeRO-3 plan")
    stages = plan.pp * S.VIRTUAL.get(plan.schedule, 1)
    if model.blocks % stages:
        problems.append(f"{model.blocks} blocks do not split into {stages} stages")
    if model.heads % plan.tp or model.width % plan.tp:
        problems.append(f"{model.heads} heads of width {model.width} do not split "
                        f"over tp={plan.tp}")
    if model.batch % (plan.dp * plan.micro):
        problems.append(f"{model.batch} sequences do not split into dp={plan.dp} x "
                        f"{plan.micro} micro-batches")
    if plan.schedule not in S.SCHEDULES:
        problems.append(f"schedule {plan.schedule!r}: use one of {S.SCHEDULES}")
    if problems:
        raise ValueError(f"{plan}: " + "; ".join(problems))


def _stage_params(model: Transformer, plan: Plan) -> tuple[float, float]:
    """Parameters on the busiest rank before ZeRO splits them, and its largest unit (a
    block, split by ``tp``). Embedding and head go to the first and last stage."""
    block = model.block_params / plan.tp
    edges = model.embed_params + model.head_params if plan.pp == 1 else \
        max(model.embed_params, model.head_params)
    return model.blocks // plan.pp * block + edges, block


def _memory(model: Transformer, plan: Plan) -> dict[str, float]:
    n, it, z = plan.shard, model.itemsize, plan.zero
    stage, block = _stage_params(model, plan)
    whole = stage * it
    # as this chapter's tools hold them at the peak of a step (see the module's text):
    # FSDP's stage 2 keeps the gathered model beside its shards, its stage 3 the shards
    # and the two units gathered at a time
    params = {0: whole, 1: whole, 2: whole * (1 + 1 / n),
              3: whole / n + 2 * (1 - 1 / n) * block * it}[z]
    mem = {"params": params, "grads": whole / n if z >= 2 else whole,
           "optimizer": model.opt_states * whole / (n if z >= 1 else 1)}
    tokens = model.batch // plan.dp // plan.micro * model.seq
    # the first stage holds the most (GPipe: all micro; 1F1B: min(pp, micro))
    in_flight = S.in_flight(plan.schedule, plan.pp, plan.micro, 0)
    per_block, edges = model.activation_bytes(plan.tp)
    mem["activations"] = in_flight * tokens * (model.blocks // plan.pp * per_block + edges)
    return mem


def step_collectives(model: Transformer, plan: Plan
                     ) -> list[tuple[str, float, int, int, str]]:
    """The collectives of one step: (op, bytes of the whole tensor, ranks, stride of the
    group's ranks, "dp" or "tp")."""
    it, m, n = model.itemsize, plan.micro, plan.shard
    stage, _ = _stage_params(model, plan)
    size = stage * it
    units = model.blocks // plan.pp + (2 if plan.pp == 1 else 1)   # + embedding, head
    stride = plan.tp * plan.pp                  # dp is the outer dimension of the mesh
    out = []
    if plan.dp > 1 and plan.zero == 0:          # DDP: the gradients, in one bucket
        out.append(("all_reduce", size, n, stride, "dp"))
    elif plan.dp > 1 and plan.zero == 1:        # + each rank's updated part, broadcast
        out += [("all_reduce", size, n, stride, "dp"), ("broadcast", size, n, stride, "dp")]
    elif plan.dp > 1:                           # per unit: gather(s), reduce-scatter
        gathers = 1 if plan.zero == 2 else 2
        for _ in range(units):
            out += [("all_gather", size / units, n, stride, "dp")] * gathers
            out.append(("reduce_scatter", size / units, n, stride, "dp"))
            if plan.replicas > 1:               # the shard, summed across the replicas
                out.append(("all_reduce", size / units / n, plan.replicas,
                            stride * n, "dp"))
    if plan.tp > 1:        # Megatron: 2 all-reduces forward, 2 backward, per block
        act = model.batch // plan.dp // m * model.seq * model.width * it
        out += [("all_reduce", act, plan.tp, 1, "tp")] * (4 * model.blocks // plan.pp * m)
    return out


def predict_plan(model: Transformer, plan: Plan, cluster: Cluster,
                 precision: str | None = None) -> PlanPrediction:
    """Step time, bytes sent and memory of the busiest rank for ``plan``; compute at the
    rate of ``precision`` (default: the one the model's values are stored in)."""
    _check(model, plan)
    if plan.devices != cluster.n:
        raise ValueError(f"{plan} uses {plan.devices} devices, {cluster.name} has "
                         f"{cluster.n}")
    m = plan.micro
    mem = _memory(model, plan)
    tokens = model.batch // plan.dp * model.seq
    rate = compute_rate(cluster, precision or precision_of(model.itemsize))
    compute = model.flops_per_token() * tokens / (plan.tp * plan.pp) / rate
    stretch = (m + plan.pp - 1) / m if plan.schedule in SCHEDULES else \
        1 / (1 - S.bubble(plan.schedule, plan.pp, m))
    terms = {"compute": compute * stretch,                   # the bubble stretches it
             "dp communication": 0.0, "tp communication": 0.0}
    sent = 0.0
    for op, size, ranks, stride, group in step_collectives(model, plan):
        link = cluster.link(ranks, stride)
        terms[f"{group} communication"] += collective_time(op, size, ranks,
                                                           link.bandwidth, link.latency)
        sent += ring_bytes(op, size, ranks)
    if plan.pp > 1:        # each micro-batch crosses each boundary forward and back
        size = tokens // m * model.width * model.itemsize
        link = cluster.link(2, plan.tp)
        crossings = 2 * m * S.VIRTUAL[plan.schedule]         # v stages: v times
        terms["pp transfers"] = crossings * (link.latency + size / link.bandwidth)
        sent += crossings * size
    terms["overhead"] = cluster.overhead
    return PlanPrediction(plan, terms, mem, sent, sum(mem.values()) <= cluster.memory)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def plans_for(model: Transformer, n: int):
    """Every plan on ``n`` devices the model's sizes allow."""
    for tp, pp in itertools.product(_divisors(n), repeat=2):
        if n % (tp * pp):
            continue
        dp = n // (tp * pp)
        micros = [1] if pp == 1 else [m for m in (pp, 2 * pp, 4 * pp, 8 * pp)]
        for zero, micro, schedule in itertools.product(range(4), micros, SCHEDULES):
            if (zero and dp == 1) or (pp == 1 and schedule == "GPipe"):
                continue
            replicas = [1] + ([r for r in _divisors(dp) if 1 < r < dp] if zero == 3 else [])
            for r in replicas:
                plan = Plan(dp, tp, pp, zero, micro, schedule, r)
                try:
                    _check(model, plan)
                except ValueError:
                    continue
                yield plan


def plan_search(model: Transformer, cluster: Cluster
                ) -> tuple[PlanPrediction | None, list[PlanPrediction]]:
    """The fastest plan that fits in memory (None if none does), and every prediction,
    the plans that fit first, fastest first."""
    preds = [predict_plan(model, p, cluster) for p in plans_for(model, cluster.n)]
    if not preds:
        raise ValueError(f"no plan splits this model over {cluster.n} devices")
    preds.sort(key=lambda p: (not p.fits, round(p.step_s, 12), p.memory))
    return (preds[0] if preds[0].fits else None), preds
