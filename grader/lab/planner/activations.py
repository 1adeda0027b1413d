"""The planner learns to fit a model: activation memory, recomputation and mixed precision
(the fitting chapter, ``chapters/fitting.md``; the page imports :data:`PRECISIONS`,
:data:`RECOMPUTE`, :class:`Knobs`, :func:`memory_terms`, :func:`predict_fitted`,
:func:`make_it_fit` and :func:`fitting_search`).

Two knobs beside the plan (:class:`~.sharded.Plan`), both of whole-model granularity:

- **precision** (:data:`PRECISIONS`): bytes per parameter of the weights, gradients and
  optimizer state, and per activation value. FP32 with Adam: 4 + 4 + 8; mixed precision
  as the ZeRO paper counts it: 2 (16-bit weights) + 2 (16-bit gradients) + 12 (FP32
  master weights and Adam's two moments, its ``K = 12``): the same 16 bytes, but 12 of
  them sharded from ZeRO-1 on, and activations of 2 bytes;
- **recompute** (:data:`RECOMPUTE`): ``none`` keeps every block's saved tensors;
  ``selective`` (Korthikanti et al. 2022) recomputes the attention core, whose saved
  tensors grow with ``seq``; ``full`` keeps each block's input only and recomputes one
  block at a time in the backward pass (one extra forward of the blocks).

What a block keeps per token is the chapter's count for a block without dropout (the
inputs of its two norms, four products and GELU, about ``16 x width`` values, plus the
softmax's ``heads x seq``), summed over the stage's blocks and the micro-batches in
flight; the head keeps two widths and the loss's log-softmax (FP32). The norms'
statistics and masks are left out: the planner prices whole models, coarsely, and this
module has no per-block interface (the chapter's cells show the formula).

Time: the sharded planner's step (:func:`~.sharded.predict_plan`), its compute scaled by
the recomputed FLOPs, priced at the rate of the plan's precision (:mod:`.rates`: FP32
or BF16, the same model every planner module uses).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from .cluster import Cluster
from .sharded import Plan, PlanPrediction, Transformer, _stage_params, plans_for, predict_plan

__all__ = ["Precision", "PRECISIONS", "RECOMPUTE", "Knobs", "KNOBS", "memory_terms",
           "recompute_flops", "FittedPrediction", "predict_fitted", "FitResult",
           "make_it_fit", "fitting_search"]


@dataclass(frozen=True)
class Precision:
    name: str
    weights: int          # bytes per parameter the model computes with
    grads: int
    master: int           # FP32 master weights kept by the optimizer (0: none)
    activations: int      # bytes per saved activation value

    def optimizer(self, states: int = 2) -> int:
        """Optimizer bytes per parameter: the master weights and ``states`` FP32
        moments (Adam: 2, so 8 in FP32 and the ZeRO paper's K = 12 in mixed precision)."""
        return self.master + 4 * states


PRECISIONS = {
    "fp32": Precision("FP32", 4, 4, 0, 4),
    "bf16": Precision("BF16 mixed precision", 2, 2, 4, 2),
}
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Knobs:
    precision: str = "fp32"
    recompute: str = "none"

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r}: use one of {tuple(PRECISIONS)}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute {self.recompute!r}: use one of {RECOMPUTE}")

    def __str__(self) -> str:
        what = [PRECISIONS[self.precision].name]
        if self.recompute != "none":
            what.append(f"{self.recompute} recomputation")
        return " + ".join(what)

    @property
    def turned(self) -> list[str]:
        """The knobs moved from the default (FP32, nothing recomputed), in words."""
        out = ["BF16 mixed precision"] if self.precision != "fp32" else []
        return out + ([f"{self.recompute} recomputation"] if self.recompute != "none" else [])


KNOBS = [Knobs(p, r) for r, p in itertools.product(RECOMPUTE, PRECISIONS)]


def _activations(model: Transformer, plan: Plan, knobs: Knobs) -> float:
    w, s, a, tp = model.width, model.seq, model.heads, plan.tp
    act = PRECISIONS[knobs.precision].activations
    # per token of one block: norms' inputs and outputs replicated over tp (4 widths),
    # q/k/v, the projection's input and the MLP's two 4x-wide ones split (12 widths)
    kept = 4 * w + 12 * w / tp
    scores = a * s / tp
    block = (kept + (0 if knobs.recompute == "selective" else scores)) * act
    edges = 2 * w * act + model.vocab * 4 + 16   # head, FP32 log-softmax, token ids
    tokens = model.batch // plan.dp // plan.micro * s
    in_flight = plan.micro if plan.schedule == "GPipe" else min(plan.pp, plan.micro)
    blocks = model.blocks // plan.pp
    if knobs.recompute == "full":   # block inputs kept, one block's set rebuilt at a time
        return in_flight * tokens * (blocks * w * act + edges) + tokens * block
    return in_flight * tokens * (blocks * block + edges)


def memory_terms(model: Transformer, plan: Plan, knobs: Knobs = Knobs()) -> dict[str, float]:
    """Bytes on the busiest rank at the peak of a step, by kind, as the sharded planner
    holds the model states (FSDP's stages 2 and 3), in ``knobs.precision``."""
    prec = PRECISIONS[knobs.precision]
    n, z = plan.shard, plan.zero
    stage, block = _stage_params(model, plan)
    w = stage * prec.weights
    params = {0: w, 1: w, 2: w * (1 + 1 / n),
              3: w / n + 2 * (1 - 1 / n) * block * prec.weights}[z]
    return {"params": params,
            "grads": stage * prec.grads / (n if z >= 2 else 1),
            "optimizer": stage * prec.optimizer(model.opt_states) / (n if z else 1),
            "activations": _activations(model, plan, knobs)}


def recompute_flops(model: Transformer, recompute: str) -> float:
    """FLOPs per token that recomputation adds: the attention core's two products
    (selective), or a whole forward of the blocks (full)."""
    core = 4 * model.seq * model.width * model.blocks
    if recompute == "selective":
        return core
    if recompute == "full":
        return 2 * model.blocks * model.block_params + core
    return 0.0


@dataclass
class FittedPrediction:
    plan: Plan
    knobs: Knobs
    step_s: float
    memory_terms: dict[str, float]
    fits: bool
    added_compute: float          # recomputation's share of extra compute (0.33 = +33 %)

    @property
    def memory(self) -> float:
        return sum(self.memory_terms.values())


def predict_fitted(model: Transformer, plan: Plan, cluster: Cluster,
                   knobs: Knobs = Knobs()) -> FittedPrediction:
    # the precision the knobs train in, at the rate model's rate for it (.rates)
    base: PlanPrediction = predict_plan(model, plan, cluster, precision=knobs.precision)
    added = recompute_flops(model, knobs.recompute) / model.flops_per_token()
    step = base.step_s + base.terms["compute"] * added
    mem = memory_terms(model, plan, knobs)
    return FittedPrediction(plan, knobs, step, mem, sum(mem.values()) <= cluster.memory,
                            added)


@dataclass
class FitResult:
    plan: Plan
    plain: FittedPrediction                # FP32, nothing recomputed
    chosen: FittedPrediction | None        # the fastest setting that fits, if any
    tried: list[FittedPrediction]

    def explain(self, memory: float) -> str:
        """What made the plan fit, in words, from the predictions."""
        gib = 2**30
        head = (f"{self.plan} in FP32 without recomputation needs "
                f"{self.plain.memory / gib:.1f} GiB per device")
        if self.plain.fits:
            return head + f", within the {memory / gib:.0f} GiB it has: no knob needed"
        if self.chosen is None:
            return head + f"; no precision or recomputation brings it under " \
                          f"{memory / gib:.0f} GiB"
        c = self.chosen
        cost = f",\n  adding {c.added_compute:.0%} to the compute" if c.added_compute else ""
        # lines that fit an output box (at most 100 characters)
        return (head + f", more than its {memory / gib:.0f} GiB;\n  "
                + " and ".join(c.knobs.turned) + f" made it fit: {c.memory / gib:.1f} GiB"
                + cost + f", {c.step_s:.3g} s per step predicted")


def make_it_fit(model: Transformer, plan: Plan, cluster: Cluster) -> FitResult:
    """Every knob setting for ``plan``; the fastest that fits (ties: fewer knobs)."""
    tried = [predict_fitted(model, plan, cluster, k) for k in KNOBS]
    ok = [p for p in tried if p.fits]
    chosen = min(ok, key=lambda p: (round(p.step_s, 12), len(p.knobs.turned)),
                 default=None)
    return FitResult(plan, tried[0], chosen, tried)


def fitting_search(model: Transformer, cluster: Cluster
                   ) -> tuple[FittedPrediction | None, list[FittedPrediction]]:
    """Every plan with every knob setting: the fastest that fits, and all of them (those
    that fit first, fastest first)."""
    preds = [predict_fitted(model, p, cluster, k)
             for p in plans_for(model, cluster.n) for k in KNOBS]
    preds.sort(key=lambda p: (not p.fits, round(p.step_s, 12), p.memory))
    return (preds[0] if preds and preds[0].fits else None), preds
