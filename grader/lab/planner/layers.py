"""Tensor and sequence parallelism in the planner: what one rank holds, moves and takes
per step when a transformer's layers are split over ``tp`` ranks (Megatron's split,
Shoeybi et al. 2019), with or without sequence parallelism (Korthikanti et al. 2022),
and optionally sharded by FSDP over ``dp`` groups. For the layers page
(chapters/tensor_parallel.md), which sets these predictions beside its measured runs.

The accounting is the one PyTorch's plan on that page runs:

- **parameters**: each block's q/k/v product, projection and MLP split ``1/tp`` (the
  row-parallel biases and the norms whole); the embedding and head split along the
  vocabulary if ``vocab_parallel`` (PyTorch's ``RowwiseParallel`` / ``ColwiseParallel``
  on them), whole otherwise (the page's by-hand model); FSDP then splits the rest ``1/dp``.
- **activations** (what autograd saves, float32, no dropout): per block, the two norms'
  inputs and the two column-parallel linears' inputs (``4 sbh``, the part tensor
  parallelism leaves whole), the q/k/v product, the projection's input and the MLP's
  hidden pair (``12 sbh / tp``), the attention weights (``a s^2 b / tp``), the norms'
  statistics. Sequence parallelism splits the norms' part ``1/tp``; the column-parallel
  linears keep the all-gathered input (``keep_gathered``, what PyTorch's ``ColwiseParallel``
  does: autograd saves the input it multiplied), where Megatron keeps its shard and
  gathers again in the backward (the paper's formula, :func:`korthikanti`).
- **collectives**: two all-reduces of the block's activations per block in each direction
  (g forward, f backward), the embedding's and the head's, and ``loss_parallel``'s three
  small ones; with sequence parallelism each becomes a reduce-scatter plus an all-gather,
  and the norms' gradients (partial sums over the ranks' tokens) are all-reduced. Over
  ``dp``, fully_shard gathers each block's tp shard before its forward and again before
  its backward (the root unit, embedding, final norm and head, once), and reduce-scatters
  every unit's gradients.
"""
from __future__ import annotations

from dataclasses import dataclass

from .cluster import Cluster
from .collectives import collective_time, ring_bytes
from .rates import compute_rate, precision_of
from .sharded import Transformer

__all__ = ["LayerPlan", "LayerPrediction", "param_bytes", "activation_bytes",
           "collectives", "bytes_moved", "predict_layers", "korthikanti"]


@dataclass(frozen=True)
class LayerPlan:
    tp: int = 1
    sp: bool = False
    dp: int = 1
    vocab_parallel: bool = True

    def __post_init__(self) -> None:
        if self.tp < 1 or self.dp < 1:
            raise ValueError(f"degrees are at least 1: tp={self.tp}, dp={self.dp}")

    def __str__(self) -> str:
        return (f"dp {self.dp} x tp {self.tp}" if self.dp > 1 else f"tp {self.tp}") + \
            (" + SP" if self.sp else "")


def _check(model: Transformer, plan: LayerPlan) -> None:
    if model.heads % plan.tp or model.vocab % plan.tp:
        raise ValueError(f"tp={plan.tp} must divide the heads ({model.heads}) and the "
                         f"vocabulary ({model.vocab})")
    if plan.sp and model.seq % plan.tp:
        raise ValueError(f"sequence parallelism splits {model.seq} tokens over "
                         f"tp={plan.tp} ranks: choose a tp that divides it")
    if model.batch % plan.dp:
        raise ValueError(f"{model.batch} sequences do not split over dp={plan.dp}")


def param_bytes(model: Transformer, plan: LayerPlan) -> float:
    """Bytes of the parameters one rank holds."""
    _check(model, plan)
    w, t = model.width, plan.tp
    split = 12 * w * w + 4 * w                  # q/k/v, projection, MLP weights, fc1 bias
    whole = 2 * w + 4 * w                       # the row-parallel biases, two norms
    block = split / t + whole
    ends = model.embed_params + model.width * model.vocab + model.vocab   # embed, head
    ends = ends / t if plan.vocab_parallel else ends
    return model.itemsize * (model.blocks * block + ends + 2 * w) / plan.dp


def activation_bytes(model: Transformer, plan: LayerPlan,
                     keep_gathered: bool = True) -> float:
    """Bytes autograd saves in one step on one rank (see the module's docstring)."""
    _check(model, plan)
    t, b = plan.tp, model.batch // plan.dp
    s, h, a = model.seq, model.width, model.heads
    sbh, sb = s * b * h, s * b
    norms = 2 * sbh + 4 * sb                    # two norms: inputs, mean and 1/std
    linear_in = 2 * sbh                         # q/k/v's and the MLP's first input
    if plan.sp:
        norms /= t
        linear_in = linear_in if keep_gathered else linear_in / t
    block = norms + linear_in + 12 * sbh / t + a * s * s * b / t
    # the end: final norm (input, stats), head input, log-softmax of the logits (split
    # along the vocabulary under loss_parallel), the token ids and the targets
    final = (sbh + 2 * sb) / (t if plan.sp else 1) + sbh
    logits = s * b * model.vocab / (t if plan.vocab_parallel else 1)
    ids = 2 * sb * 8 / model.itemsize           # int64, in units of itemsize
    masks = model.blocks * s * s / model.itemsize   # the causal mask, one byte each
    return model.itemsize * (model.blocks * block + final + logits + ids + masks)


def collectives(model: Transformer, plan: LayerPlan) -> list[tuple[str, str, float, int]]:
    """The collectives of one step on one rank: (phase, op, bytes of the whole tensor,
    ranks), in PyTorch's plan (by hand, ``vocab_parallel=False``: the blocks' only)."""
    _check(model, plan)
    t, n = plan.tp, model.blocks
    x = model.seq * (model.batch // plan.dp) * model.width * model.itemsize
    out = []
    if t > 1:
        pairs = 2 * n + (1 if plan.vocab_parallel else 0)   # + embedding / head
        for phase in ("forward", "backward"):
            for _ in range(pairs):
                if plan.sp:
                    out += [(phase, "reduce_scatter", x, t), (phase, "all_gather", x, t)]
                else:
                    out.append((phase, "all_reduce", x, t))
        if plan.vocab_parallel:                     # loss_parallel: max, sum, target
            tokens = model.seq * (model.batch // plan.dp) * model.itemsize
            out += [("forward", "all_reduce", tokens, t)] * 3
        if plan.sp:                                 # the norms' gradients
            norms = 2 * n + 1
            out += [("backward", "all_reduce", model.width * model.itemsize, t)] * (2 * norms)
    if plan.dp > 1:       # fully_shard over dp, per unit: each block, and the root
        w, d = model.width, plan.dp
        block = model.itemsize * ((12 * w * w + 4 * w) / t + 6 * w)   # its tp shard
        ends = model.embed_params + w * model.vocab + model.vocab
        root = model.itemsize * ((ends / t if plan.vocab_parallel else ends) + 2 * w)
        out += [("forward", "all_gather", block, d)] * n + [("forward", "all_gather", root, d)]
        # the root stays gathered from its forward to its backward; the blocks are
        # gathered again
        out += [("backward", "all_gather", block, d)] * n
        out += [("backward", "reduce_scatter", block, d)] * n + \
            [("backward", "reduce_scatter", root, d)]
    return out


def bytes_moved(model: Transformer, plan: LayerPlan) -> float:
    """Bytes one rank sends in a step (ring algorithms)."""
    return sum(ring_bytes(op, size, p) for _, op, size, p in collectives(model, plan))


@dataclass
class LayerPrediction:
    plan: LayerPlan
    params: float
    activations: float
    sent: float
    step_s: float
    terms: dict

    @property
    def memory(self) -> float:      # parameters, gradients, Adam's two moments, activations
        return 4 * self.params + self.activations


def predict_layers(model: Transformer, plan: LayerPlan, cluster: Cluster,
                   keep_gathered: bool = True) -> LayerPrediction:
    """Memory, bytes sent and time of one step on one rank; compute and collectives add
    up (nothing overlaps), plus the cluster's per-step overhead."""
    tokens = model.seq * model.batch
    rate = compute_rate(cluster, precision_of(model.itemsize))
    compute = model.flops_per_token() * tokens / (plan.tp * plan.dp) / rate
    calls = collectives(model, plan)
    comm = 0.0
    for _, op, size, p in calls:
        stride = plan.tp if p == plan.dp and plan.dp > 1 else 1
        link = cluster.link(p, stride)
        comm += collective_time(op, size, p, link.bandwidth, link.latency)
    terms = {"compute": compute, "collectives": comm, "overhead": cluster.overhead}
    return LayerPrediction(plan, param_bytes(model, plan),
                           activation_bytes(model, plan, keep_gathered),
                           bytes_moved(model, plan), sum(terms.values()), terms)


def korthikanti(model: Transformer, tp: int, sp: bool) -> float:
    """Korthikanti et al. 2022, eq. 2-4: bytes of one block's activations in 16-bit
    training with dropout, ``sbh (10 + 24/t + 5as/(ht))``, or with sequence parallelism
    ``sbh/t (34 + 5as/h)``. Not this page's models (float32, no dropout): the same
    shape, other constants."""
    s, b, h, a = model.seq, model.batch, model.width, model.heads
    if sp:
        return s * b * h / tp * (34 + 5 * a * s / h)
    return s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))
