"""One description of a composed layout, read by the capstone's runs, the planner and
the page alike.

A :class:`Layout` is ``replicate x shard x tp x pp``: ``replicate`` groups of whole
copies (data parallel across them), each sharded over ``shard`` ranks (FSDP/ZeRO-3;
the two together are HSDP), every block's matrices split over ``tp`` ranks (Megatron's
column-then-row split) and the blocks cut into ``pp`` pipeline stages run by a
``schedule`` over ``micro`` micro-batches. Its text form ``"RxSxTxP"`` (e.g.
``"2x2x2x2"``) is what the chapter's scripts take on their command line
(``--layouts 1x2x2x1``) and write back into their records, so :meth:`Layout.parse`
of a record's layout is the layout the planner prices.

:func:`memory_terms` and :func:`step_collectives` price a layout as the capstone's
parallelize functions build it, where :mod:`.sharded`'s general model of ZeRO-3 was
wrong for it (the scale page, chapters/scale.md, measured each of these with
PyTorch's memory tracker on a fake process group):

- FSDP's units are the blocks and one *root* unit (the embedding, final norm and head
  together), not a block as the largest unit: the root holds the vocabulary-sized
  matrices, is gathered once per step and stays gathered from its forward to its
  backward; each block is gathered before its forward and again before its backward;
- a gathered unit is a copy beside the shard (FSDP2 copies it out of its all-gather
  buffer), so it counts whole at every degree, where ``(1 - 1/n)`` of it vanished at
  ``n = 1``; the root's unsharded gradients are held until its reduce-scatter, the
  last of the step;
- the embedding's gradient is built at the size of the whole matrix on every
  tensor-parallel rank (the tracker saw one tensor of ``vocab x width`` values in the
  backward), not as its ``1/tp`` share;
- tensor parallelism splits the embedding and the head along the vocabulary too
  (``RowwiseParallel`` / ``ColwiseParallel`` on them, as :mod:`.layers` already has
  it), where :mod:`.sharded` kept them whole on every tensor-parallel rank;
- the blocks' three separate q, k, v products all-reduce their input's gradient once
  each (six all-reduces per block and micro-batch, not Megatron's fused four), the
  split embedding all-reduces its output, the head gathers its logits (forward) and
  all-reduces its input's gradient (backward);
- under a pipeline, ``PipelineStage`` keeps every block of the stage gathered and its
  gradients unreduced from the first micro-batch's backward to the last one's (a
  2-block model hid this: its stage has one block; tracked at all 32, a stage of
  16 blocks held 1.8 GiB of parameters where the general rule said 0.4);
- a pipeline's first stage keeps each micro-batch's output until its gradient comes
  back, and holds, at its fullest, the last block's attention scores before the
  softmax (the tracker's activations of ``1x32x8x2``, attributed to the lines of the
  capstone's block, 0.17 GiB beyond the blocks' count at 2 blocks);
- a shard group of one rank (``R x 1``: FSDP over a (replicate, 1) mesh) gathers and
  reduce-scatters nothing; the replicas all-reduce each unit's gradients.

The planner had two descriptions of a layout before this one, each for its chapter:
:class:`~.sharded.Plan` (data, ZeRO, tensor and pipeline degrees) and
:class:`~.mesh.MeshPlan` (data, tensor, context and expert degrees, no pipeline).
:meth:`Layout.plan` and :meth:`Layout.mesh_plan` translate to them, so that each of
their predictions is made for the same layout, and :func:`predict` prices a layout
with :func:`~.sharded.predict_plan` (the one of the two that knows pipelines).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .cluster import Cluster, with_devices
from .mesh import MeshPlan
from .sharded import SCHEDULES, Plan, PlanPrediction, Transformer, predict_plan

__all__ = ["Layout", "predict", "DIM_NAMES", "units", "memory_terms", "step_collectives"]

# the mesh's dimensions, outermost first (torchtitan's order: the pipeline outermost,
# tensor parallelism innermost, on the neighbouring ranks with the fastest links)
DIM_NAMES = ("pp", "dp_replicate", "dp_shard", "tp")
_TEXT = re.compile(r"^\s*(\d+)x(\d+)x(\d+)x(\d+)\s*$")


@dataclass(frozen=True)
class Layout:
    replicate: int = 1
    shard: int = 1
    tp: int = 1
    pp: int = 1
    micro: int = 2                 # micro-batches per step when pp > 1
    schedule: str = "1F1B"

    def __post_init__(self) -> None:
        degrees = {"replicate": self.replicate, "shard": self.shard, "tp": self.tp,
                   "pp": self.pp, "micro": self.micro}
        bad = [f"{k}={v!r}" for k, v in degrees.items()
               if not isinstance(v, int) or isinstance(v, bool) or v < 1]
        if bad:
            raise ValueError(f"a layout's degrees are whole numbers of at least 1: "
                             f"{', '.join(bad)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r}: use one of {SCHEDULES}")

    @classmethod
    def parse(cls, text: str, **kw) -> "Layout":
        """``"RxSxTxP"`` (replicate x shard x tensor x pipeline) as a layout."""
        m = _TEXT.match(str(text))
        if not m:
            raise ValueError(f"{text!r} is not a layout: write replicate x shard x "
                             "tensor x pipeline as four whole numbers, e.g. '2x2x2x2'")
        r, s, t, p = (int(g) for g in m.groups())
        return cls(r, s, t, p, **kw)

    @property
    def text(self) -> str:
        """What the scripts take: ``"RxSxTxP"``."""
        return f"{self.replicate}x{self.shard}x{self.tp}x{self.pp}"

    @property
    def ranks(self) -> int:
        return self.replicate * self.shard * self.tp * self.pp

    @property
    def dp(self) -> int:
        """Ranks that each train a different part of the batch."""
        return self.replicate * self.shard

    @property
    def mesh_shape(self) -> tuple[int, int, int, int]:
        """The device mesh's shape, in :data:`DIM_NAMES`' order."""
        return (self.pp, self.replicate, self.shard, self.tp)

    @property
    def axes(self) -> int:
        """How many of the four axes are used (degree above 1)."""
        return sum(d > 1 for d in (self.replicate, self.shard, self.tp, self.pp))

    def __str__(self) -> str:
        parts = []
        if self.replicate > 1 and self.shard > 1:
            parts.append(f"HSDP {self.replicate} x {self.shard}")
        elif self.shard > 1:
            parts.append(f"FSDP x{self.shard}")
        elif self.replicate > 1:
            parts.append(f"DP x{self.replicate}")
        if self.tp > 1:
            parts.append(f"TP x{self.tp}")
        if self.pp > 1:
            parts.append(f"PP x{self.pp}")
        return " + ".join(parts) or "1 device"

    def check(self, model: Transformer) -> list[str]:
        """What in the model's sizes rules the layout out (empty: nothing)."""
        out = []
        if model.heads % self.tp or model.vocab % self.tp:
            out.append(f"tp={self.tp} divides neither the {model.heads} heads nor the "
                       f"vocabulary of {model.vocab}")
        if model.blocks % self.pp:
            out.append(f"{model.blocks} blocks do not cut into {self.pp} stages")
        per_rank = model.batch // self.dp if model.batch % self.dp == 0 else 0
        if not per_rank:
            out.append(f"{model.batch} sequences do not split over {self.dp} "
                       "data-parallel ranks")
        elif self.pp > 1 and per_rank % self.micro:
            out.append(f"a rank's {per_rank} sequences do not cut into {self.micro} "
                       "micro-batches")
        return out

    def plan(self) -> Plan:
        """The same layout as :mod:`.sharded` describes it: ZeRO-3 over the ``shard``
        ranks of each of ``replicate`` groups (plain data parallelism if ``shard`` is
        1)."""
        return Plan(dp=self.dp, tp=self.tp, pp=self.pp, zero=3 if self.shard > 1 else 0,
                    micro=self.micro if self.pp > 1 else 1, schedule=self.schedule,
                    replicas=self.replicate if self.shard > 1 else 1)

    def mesh_plan(self) -> MeshPlan:
        """The same layout as :mod:`.mesh` describes it (which has no pipeline: a
        layout with ``pp`` > 1 raises). :class:`~.mesh.MeshPlan` shards over all its
        data-parallel ranks, so HSDP (``replicate`` and ``shard`` both above 1) has
        no MeshPlan either."""
        if self.pp > 1:
            raise ValueError(f"{self}: the mesh planner has no pipeline; use plan()")
        if self.replicate > 1 and self.shard > 1:
            raise ValueError(f"{self}: the mesh planner shards over all data-parallel "
                             "ranks (no HSDP); use plan()")
        return MeshPlan(dp=self.dp, tp=self.tp, zero=3 if self.shard > 1 else 0)


def predict(model: Transformer, layout: Layout, cluster: Cluster) -> PlanPrediction:
    """Memory per rank, bytes sent and step time of ``layout``, as
    :func:`~.sharded.predict_plan` prices its :meth:`Layout.plan`, on ``layout.ranks``
    of ``cluster``'s devices."""
    problems = layout.check(model)
    if problems:
        raise ValueError(f"{layout.text} ({layout}): " + "; ".join(problems))
    return predict_plan(model, layout.plan(), with_devices(cluster, layout.ranks))


def units(model: Transformer, layout: Layout, stage: int = 0) -> tuple[float, float, int]:
    """Values of one block and of the root unit on a rank of ``stage`` before FSDP
    shards them, and the blocks of the stage: tensor parallelism splits every
    matrix, the q/k/v and MLP biases and the embedding and head along the vocabulary;
    the row-parallel biases and the norms stay whole."""
    w, t = model.width, layout.tp
    block = (12 * w * w + 4 * w) / t + 6 * w
    first, last = stage == 0, stage == layout.pp - 1
    root = (model.vocab * w / t if first else 0.0) + \
        ((w * model.vocab + model.vocab) / t + 2 * w if last else 0.0)
    return block, root, model.blocks // layout.pp


def memory_terms(model: Transformer, layout: Layout, stage: int = 0) -> dict[str, float]:
    """Bytes of rank 0 of ``stage``, by kind, each at its own peak in a step, as the
    capstone's functions hold them (see the module's text), for the micro-batches the
    stage holds in flight."""
    block, root, blocks = units(model, layout, stage)
    it, n = model.itemsize, layout.shard
    whole = (blocks * block + root) * it
    micro = layout.micro if layout.pp > 1 else 1
    if layout.dp > 1:
        # fully_shard: the shards, the root gathered and a block; PipelineStage keeps
        # every block gathered and its gradients whole from the first backward to the
        # last micro-batch's, when it reduces and frees them all
        kept = micro > 1
        params = whole / n + (root + (blocks if kept else 1) * block) * it
        # at the end of the backward: the blocks' gradients reduced to their shards
        # (or kept whole), the root's whole, the embedding's at the size of the whole
        # matrix
        embed = model.vocab * model.width if stage == 0 else 0.0
        grads = (blocks * block / (1 if kept else n) + root
                 + embed * (1 - 1 / layout.tp)) * it
        opt = model.opt_states * whole / n
    else:
        params, grads, opt = whole, whole, model.opt_states * whole
    # the forward at its fullest, per token of the micro-batches the stage holds in
    # flight (1F1B's first stage: min(pp, micro)): each block keeps its two norms'
    # inputs and outputs whole, its q, k, v, attention output and the MLP's two 4x-wide
    # tensors split, and the attention weights after the softmax (the fitting
    # chapter's count); the last stage's head holds the logits and their log-softmax,
    # and under tensor parallelism also its own share of the logits, gathered whole on
    # every rank (the capstone's head outputs them replicated)
    w, v, t = model.width, model.vocab, layout.tp
    per_block = (4 * w + 12 * w / t + model.heads * model.seq / t) * it
    last = stage == layout.pp - 1
    head = (2 * v + (v / t if t > 1 else 0) + 2 * w) * it if last else 0.0
    in_flight = min(layout.pp, micro) if layout.pp > 1 else 1
    tokens = model.batch // layout.dp // micro * model.seq
    # a stage before the last keeps each micro-batch's output until its gradient comes
    # back; at the forward's fullest, the head's tensors or, where there is no head,
    # one micro-batch's attention scores before the softmax (the last block's)
    held = 0.0 if last else w * it
    scores = tokens * model.heads * model.seq / t * it
    acts = in_flight * tokens * (blocks * per_block + held) + \
        max(in_flight * tokens * head, scores)
    # temporaries, at the largest of three moments: a unit's gather (the root's buffer
    # and the next block's, fetched ahead); the loss's backward (the gradients of the
    # log-softmax and of the whole logits, on every tensor-parallel rank); on a first
    # stage with micro-batches, a later one's embedding gradient (whole-matrix sized,
    # as above) added into the one held unreduced, beside a block's gather buffer
    gathers = (root + block) * it if layout.shard > 1 else 0.0
    loss = 2 * tokens * v * it if last else 0.0
    later = (v * w + (block if layout.shard > 1 else 0.0)) * it \
        if stage == 0 and in_flight > 1 else 0.0
    return {"params": params, "grads": grads, "optimizer": opt, "activations": acts,
            "temporaries": max(gathers, loss, later)}


def step_collectives(model: Transformer, layout: Layout, stage: int = 0,
                     micro: int | None = None) -> list[tuple[str, str]]:
    """The collectives rank 0 of ``stage`` starts in a step: (op, "dp", "tp" or "pp"),
    as the capstone's functions issue them (see the module's text). A pipeline's stage
    runs ``micro`` micro-batches (default: the layout's) in 1F1B's order, FSDP as
    ``PipelineStage`` runs it: the gradients reduced and the blocks freed once, after
    the last backward, so a block is gathered for each forward before the first
    backward and once more for that backward; the activations sent to the next stage
    and their gradients received back are one send and one receive per micro-batch
    and stage boundary."""
    _, root, blocks = units(model, layout, stage)
    pp = layout.pp
    m = (layout.micro if micro is None else micro) if pp > 1 else 1
    first, last = stage == 0, stage == pp - 1
    unit_count = blocks + (1 if root else 0)
    out: list[tuple[str, str]] = []
    if layout.tp > 1:
        per_micro = [("all_reduce", "tp")] * (6 * blocks)     # 2 forward, 4 backward
        if first:                                              # the split embedding
            per_micro.append(("all_reduce", "tp"))
        if last:                                               # the head
            per_micro += [("all_gather", "tp"), ("all_reduce", "tp")]
        out += per_micro * m
    if layout.shard > 1:
        # forwards before the first backward: 1F1B's warm-up, at most pp - stage
        warm = min(pp - stage, m)
        out += [("all_gather", "dp")] * (blocks * (warm + 1) + (1 if root else 0))
        out += [("reduce_scatter", "dp")] * unit_count
    if layout.replicate > 1:                                   # across the replicas
        out += [("all_reduce", "dp")] * unit_count
    if pp > 1:
        sends = m * ((0 if last else 1) + (0 if first else 1))
        out += [("send", "pp")] * sends + [("recv", "pp")] * sends
    return out
