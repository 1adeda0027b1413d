"""The planner's search over data, tensor, sequence, context and expert parallelism.

A :class:`MeshPlan` puts ``dp x cp x tp`` ranks on a mesh, ``tp`` the inner dimension
(neighbouring ranks, the fastest links), ``cp`` next, ``dp`` outermost; ``sp`` turns
tensor parallelism's all-reduces into reduce-scatters and all-gathers (:mod:`.layers`);
``zero`` shards the model states; ``ep`` spreads a :class:`~.experts.MoE`'s experts
over ``ep`` of the data-parallel ranks (``ep`` divides ``dp``); ``layout`` is the
ring's split of the sequence (:mod:`.context`). The model is a
:class:`~.sharded.Transformer`, every block's MLP replaced by the mixture when a
``moe`` is given. A step is causal (a GPT).

:func:`predict_mesh` prices one plan on a :class:`~.cluster.Cluster`, each term from the
module that counts it:

- memory per rank: parameters (:func:`~.layers.param_bytes`, the experts
  :func:`~.experts.expert_params_per_rank`), their gradients and ``opt_states``
  optimizer values each, sharded by ``zero`` (ZeRO's stages, as :mod:`.sharded` holds
  them) over the ``dp x cp`` ranks that hold the same weights (the experts' over
  ``dp x cp / ep``); the activations of :func:`~.layers.activation_bytes`, divided by
  ``cp`` (each rank keeps its tokens, and its queries' attention weights over all
  keys), with a mixture's saved tensors per slot in place of the MLP's per token;
  under ``cp`` two key/value blocks arriving (keys and values, and in the backward
  their gradients);
- time: compute (the model's FLOPs per token over the rank's tokens, split by ``tp``;
  the attention core stretched by the ring's causal imbalance; the experts on every
  slot of their buffer), tensor parallelism's collectives (:func:`~.layers.collectives`
  on the rank's ``seq / cp`` tokens), the ring's ``3 (cp - 1)`` block transfers per
  layer (:func:`~.context.step_blocks`), the four all-to-alls of each MoE layer
  (:func:`~.experts.exchanges`), the gradients' collectives over the ranks that hold
  the same weights (an all-reduce, or ZeRO's gathers and reduce-scatters per unit),
  and the cluster's overhead. Nothing overlaps; links as
  :meth:`~.cluster.Cluster.link` gives them.

:func:`mesh_search` tries every plan the sizes allow on the cluster's devices and
returns the fastest that fits (pipeline stages stay with :func:`~.sharded.plan_search`,
precision and recomputation with :mod:`.activations`); a plan that does not fit is
kept with its reason (:attr:`MeshPrediction.refused`), and :func:`why_not` says why a
plan is not tried.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from . import context as C
from . import experts as E
from .cluster import Cluster
from .collectives import collective_time, ring_bytes
from .layers import LayerPlan, activation_bytes, collectives, param_bytes
from .rates import compute_rate, precision_of
from .sharded import Transformer

__all__ = ["MeshPlan", "MeshPrediction", "why_not", "mesh_plans", "predict_mesh",
           "mesh_search"]


@dataclass(frozen=True)
class MeshPlan:
    dp: int = 1
    tp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    layout: str = "zigzag"
    zero: int = 0             # ZeRO stage over the dp x cp ranks that hold the same weights

    @property
    def devices(self) -> int:
        return self.dp * self.cp * self.tp

    def __str__(self) -> str:
        parts = [f"{k.upper()} x{v}" for k, v in (("dp", self.dp), ("tp", self.tp),
                                                   ("cp", self.cp), ("ep", self.ep))
                 if v > 1]
        if self.sp:
            parts.append("SP")
        if self.zero:
            parts.append(f"ZeRO-{self.zero}")
        text = " + ".join(parts) or "1 device"
        return text + (f", {self.layout} ring" if self.cp > 1 else "")


def why_not(model: Transformer, plan: MeshPlan, moe: E.MoE | None = None) -> list[str]:
    """What in the model's sizes rules the plan out (empty: nothing)."""
    out = []
    if min(plan.dp, plan.tp, plan.cp, plan.ep) < 1:
        return [f"degrees are at least 1: {plan!r}"]
    if model.heads % plan.tp or model.vocab % plan.tp:
        out.append(f"tp={plan.tp} does not divide the {model.heads} heads and the "
                   f"vocabulary of {model.vocab}")
    if model.batch % plan.dp:
        out.append(f"{model.batch} sequences do not split over dp={plan.dp}")
    if plan.cp > 1 and model.seq % (2 * plan.cp):
        out.append(f"{model.seq} tokens do not cut into 2 x cp = {2 * plan.cp} chunks")
    elif plan.sp and (model.seq // plan.cp) % plan.tp:
        out.append(f"sequence parallelism splits {model.seq // plan.cp} tokens per rank "
                   f"over tp={plan.tp}")
    if plan.sp and plan.tp == 1:
        out.append("sequence parallelism needs tensor parallelism (tp > 1)")
    if plan.zero not in (0, 1, 2, 3):
        out.append(f"ZeRO has stages 0 (none) to 3, not {plan.zero!r}")
    elif plan.zero and plan.dp * plan.cp == 1:
        out.append(f"ZeRO-{plan.zero} needs ranks that hold the same weights (dp x cp > 1)")
    if plan.layout not in C.LAYOUTS:
        out.append(f"layout {plan.layout!r}: use one of {C.LAYOUTS}")
    if plan.ep > 1:
        if moe is None:
            out.append("expert parallelism needs a mixture of experts")
        elif moe.experts % plan.ep or plan.dp % plan.ep:
            out.append(f"ep={plan.ep} must divide the {moe.experts} experts and dp={plan.dp}")
    return out


def _mlp_params(model: Transformer, tp: int) -> float:
    """One block's dense MLP on one rank, as :func:`~.layers.param_bytes` counts it."""
    w = model.width
    return (8 * w * w + 4 * w) / tp + w


@dataclass
class MeshPrediction:
    plan: MeshPlan
    terms: dict[str, float]              # seconds per step, by source
    memory_terms: dict[str, float]       # bytes on one rank, by kind
    sent: dict[str, float]               # bytes one rank sends per step, by group
    capacity: float                      # bytes one device has
    moe: E.MoE | None = None

    @property
    def step_s(self) -> float:
        return sum(self.terms.values())

    @property
    def memory(self) -> float:
        return sum(self.memory_terms.values())

    @property
    def bytes_sent(self) -> float:
        return sum(self.sent.values())

    @property
    def fits(self) -> bool:
        return self.memory <= self.capacity

    @property
    def refused(self) -> str:
        """Why the plan is refused ("" when it fits), from its figures."""
        if self.fits:
            return ""
        kind, most = max(self.memory_terms.items(), key=lambda kv: kv[1])
        gib = 2**30
        return (f"{self.plan} needs {self.memory / gib:.3g} GiB per device, more than the "
                f"{self.capacity / gib:.3g} GiB it has ({kind} the largest part, "
                f"{most / gib:.3g} GiB)")


def predict_mesh(model: Transformer, plan: MeshPlan, cluster: Cluster,
                 moe: E.MoE | None = None) -> MeshPrediction:
    """Memory, bytes sent and time of one training step on one rank of ``plan``."""
    problems = why_not(model, plan, moe)
    if problems:
        raise ValueError(f"{plan}: " + "; ".join(problems))
    if plan.devices != cluster.n:
        raise ValueError(f"{plan} uses {plan.devices} devices, {cluster.name} has "
                         f"{cluster.n}")
    w, it, n, tp, cp = model.width, model.itemsize, model.blocks, plan.tp, plan.cp
    b = model.batch // plan.dp
    tokens = b * model.seq // cp                        # this rank's tokens
    # parameters: the dense model as the layers page counts it, MLPs swapped for experts
    dense = param_bytes(model, LayerPlan(tp, plan.sp)) / it
    experts = 0.0
    if moe is not None:
        dense -= n * _mlp_params(model, tp)
        routers = n * w * moe.experts
        experts = n * E.expert_params_per_rank(moe, w, plan.ep, tp) - routers
        dense += routers
    params = dense + experts
    replicas = plan.dp * cp                         # ranks that hold the same weights
    groups = [(dense, replicas), (experts, replicas // plan.ep)]   # (values, ranks)
    # activations: the layers page's count, split by cp; a mixture saves per slot
    acts = activation_bytes(model, LayerPlan(tp, plan.sp, plan.dp)) / cp
    slots = 0
    if moe is not None:
        slots = E.expert_slots(tokens, moe)
        mlp_acts = tokens * w + 8 * tokens * w / tp     # fc1's input, the hidden pair
        moe_acts = slots * (2 * w + 8 * w / tp) + tokens * moe.experts
        acts += n * it * (moe_acts - mlp_acts)
    memory = _model_states(model, plan, groups, moe)
    memory["activations"] = acts
    attn = C.RingAttention(model.seq, model.heads // tp, w // model.heads, b, it)
    if cp > 1:
        memory["ring buffers"] = 2 * attn.block_bytes(cp)
    # compute
    core = 12 * model.seq * w * n                       # attention's products, per token
    rest = model.flops_per_token() - core
    if moe is not None:
        rest -= n * 6 * (8 * w * w + 5 * w)
        rest += n * 6 * w * moe.experts                 # the router
    flops = tokens * (rest + core * C.causal_imbalance(cp, plan.layout)) / tp
    if moe is not None:
        flops += n * 6 * slots * E.expert_params(moe, w) / tp
    # 16-bit values compute at the 16-bit rate (.rates): one rate model for the planner
    terms = {"compute": flops / compute_rate(cluster, precision_of(model.itemsize))}
    sent = {}
    # tensor (and sequence) parallelism, on the rank's tokens
    if tp > 1:
        local = replace(model, seq=model.seq // cp, batch=b)
        link = cluster.link(tp, 1)
        calls = collectives(local, LayerPlan(tp, plan.sp))
        terms["tp communication"] = sum(collective_time(op, s, p, link.bandwidth,
                                                        link.latency)
                                        for _, op, s, p in calls)
        sent["tp"] = sum(ring_bytes(op, s, p) for _, op, s, p in calls)
    if cp > 1:
        link = cluster.link(cp, tp)
        transfers = n * C.step_blocks(cp)
        block = attn.block_bytes(cp)
        terms["cp ring"] = transfers * (link.latency + block / link.bandwidth)
        sent["cp"] = transfers * block
    if moe is not None and plan.ep > 1:
        link = cluster.link(plan.ep, tp * cp)
        ex = E.exchanges(tokens, w, moe, plan.ep, it)
        terms["ep all-to-all"] = n * sum(E.all_to_all_time(size, plan.ep, link.bandwidth,
                                                           link.latency)
                                         for _, _, size, _ in ex)
        sent["ep"] = n * sum(s for *_, s in ex)
    if replicas > 1:          # gradients: dense over dp x cp, experts over dp x cp / ep
        link = cluster.link(replicas, tp)
        calls = _sync(model, plan, groups)
        terms["dp communication"] = sum(collective_time(op, s, p, link.bandwidth,
                                                        link.latency)
                                        for op, s, p in calls)
        sent["dp"] = sum(ring_bytes(op, s, p) for op, s, p in calls)
    terms["overhead"] = cluster.overhead
    return MeshPrediction(plan, terms, memory, sent, cluster.memory, moe)


def _model_states(model: Transformer, plan: MeshPlan, groups, moe) -> dict[str, float]:
    """Parameters, gradients and optimizer values on one rank, each group of weights
    sharded over its ranks as the sharding chapter's planner holds them
    (:mod:`.sharded`): ZeRO-1 splits the optimizer, ZeRO-2 the gradients too (and holds
    the gathered model beside its shards), ZeRO-3 the parameters, with two units (a
    block) gathered at a time."""
    it, z, w = model.itemsize, plan.zero, model.width
    out = {"params": 0.0, "grads": 0.0, "optimizer": 0.0}
    # the largest unit gathered at a time: a block, its dense part and its experts
    dense_unit = model.block_params / plan.tp if moe is None else \
        (model.block_params - 8 * w * w - 5 * w) / plan.tp + w * moe.experts
    units = [dense_unit, groups[1][0] / model.blocks]
    for (values, n), unit in zip(groups, units):
        if not values:
            continue
        whole = values * it
        out["params"] += {0: whole, 1: whole, 2: whole * (1 + 1 / n),
                          3: whole / n + 2 * (1 - 1 / n) * unit * it}[z]
        out["grads"] += whole / n if z >= 2 else whole
        out["optimizer"] += model.opt_states * whole / (n if z >= 1 else 1)
    return out


def _sync(model: Transformer, plan: MeshPlan, groups) -> list[tuple[str, float, int]]:
    """The collectives over the ranks that hold the same weights: (op, bytes of the
    whole tensor, ranks), per group of weights, as :func:`~.sharded.step_collectives`
    has them for each ZeRO stage."""
    it, out = model.itemsize, []
    units = model.blocks + 2                         # the blocks, embedding, head
    for values, n in groups:
        size = values * it
        if not size or n <= 1:
            continue
        if plan.zero == 0:
            out.append(("all_reduce", size, n))
        elif plan.zero == 1:
            out += [("all_reduce", size, n), ("broadcast", size, n)]
        else:
            gathers = 1 if plan.zero == 2 else 2
            out += [("all_gather", size / units, n)] * (gathers * units)
            out += [("reduce_scatter", size / units, n)] * units
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def mesh_plans(model: Transformer, n: int, moe: E.MoE | None = None):
    """Every plan on ``n`` devices the sizes allow (both ring layouts where ``cp > 1``)."""
    for tp, cp in itertools.product(_divisors(n), repeat=2):
        if n % (tp * cp):
            continue
        dp = n // (tp * cp)
        eps = _divisors(dp) if moe is not None else [1]
        layouts = C.LAYOUTS if cp > 1 else ("zigzag",)
        for ep, sp, layout, zero in itertools.product(eps, (False, True), layouts,
                                                      range(4)):
            plan = MeshPlan(dp, tp, cp, ep, sp, layout, zero)
            if not why_not(model, plan, moe):
                yield plan


def mesh_search(model: Transformer, cluster: Cluster, moe: E.MoE | None = None
                ) -> tuple[MeshPrediction | None, list[MeshPrediction]]:
    """The fastest plan that fits (None if none does) and every prediction, those that
    fit first, fastest first; each refused one says why (:attr:`MeshPrediction.refused`).
    Ties go to the plan with fewer kinds of parallelism."""
    preds = [predict_mesh(model, p, cluster, moe) for p in mesh_plans(model, cluster.n, moe)]
    if not preds:
        raise ValueError(f"no plan splits this model over {cluster.n} devices")

    def kinds(p: MeshPrediction) -> int:
        q = p.plan
        return sum(v > 1 for v in (q.dp, q.tp, q.cp, q.ep)) + q.sp + (q.zero > 0)

    preds.sort(key=lambda p: (not p.fits, round(p.step_s, 12), kinds(p), p.memory))
    return (preds[0] if preds[0].fits else None), preds
