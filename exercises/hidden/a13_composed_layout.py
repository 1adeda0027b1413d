"""Hidden checks of assignment 13 (the public ones: ``grader.checks.a13_composed_layout``),
and the trusted run they stand on: the capstone's transformer built and stepped once in a
layout, on one rank of a *fake* process group, and measured. Nothing the student wrote
runs here: their functions run in the kernel and hand back a layout and four numbers.

The run
-------

``torch.distributed``'s ``fake`` backend (``FakeStore``) lets one process be rank ``k`` of
``n`` ranks: every collective returns at once without moving data, so a layout of 8
ranks is built with a real ``DeviceMesh``, ``parallelize_module``, the pipeline's cut and
``fully_shard``, in the capstone's order (tensor, pipeline, FSDP), and stepped with Adam,
in 0.1 to 0.3 s on a quiet core of the course's 2-core machine (1 to 2 s at a load of 7
to 10). The values are garbage; the shapes, and so the bytes, are those of a real run,
and nothing depends on a clock.

What is measured on the rank, in bytes:

- ``params``, ``grads``, ``optimizer``: the rank's own shards after one Adam step (the
  local tensors of DTensors; Adam's two moments ``exp_avg`` and ``exp_avg_sq``; its
  ``step`` counter, one number per tensor, left out). FSDP's gathered copies are transient
  and not counted: these are what the rank keeps between steps;
- ``activations``: every tensor autograd saved for backward while this stage's
  micro-batches are in flight (``saved_tensors_hooks``, each storage once, parameters and
  FSDP's gathered parameters left out), with as many micro-batches in flight as 1F1B keeps
  on the stage (``min(pp - stage, micro)``; one, the whole local batch, without a
  pipeline). The pipeline's sends and receives are not run: the stage's input is made
  where it would arrive;
- ``collectives``: each collective the rank started while those micro-batches ran
  forward and backward and Adam stepped, with the bytes of its largest tensor, counted
  at the dispatcher as the capstone's ``CommSizes`` does, and the pipeline's sends that
  go with them (:func:`_sends`: counted, not made).

One deviation from the capstone's script: the embedding stays whole under tensor
parallelism. Split by vocabulary rows with ``RowwiseParallel``, its gradient came back
as the whole table on each rank (seen on the fake process group: 64 x 32 against the
32 x 32 shard), so the gradients would not be the parameters' size.

The checks
----------
``check_predict_memory`` (6 points: params 2, grads 1, optimizer 1, activations 2) asks
for rank 0's bytes on layouts and models the notebook does not show, drawn from the
course's secret, and compares each kind with the run's measurement (params, grads and
optimizer within 0.5 %; activations within 2 %, so that the causal masks, the token ids
and the loss's targets may be left out: at most 1.4 % on every layout of these models,
where leaving out the LayerNorm statistics too reaches 2.8 %). ``check_choose_layout``
(4 points) asks for a 2-D or 3-D layout for models, rank counts and budgets drawn the
same way: 1 for a layout the model's sizes allow, 2 for every rank within the budget as
measured (each pipeline stage is built), 1 for the fewest bytes in rank 0's collectives
(and pipeline sends) among the layouts that fit. A hint names the mistake the answer's
figures show (:data:`MISTAKES`: each is the rule with one step done wrong, and the hint
is given only when that variant reproduces every case); a layout over the budget is told
what the student's own ``predict_memory`` says of its largest stage, against the run.
"""
from __future__ import annotations

import itertools
import math
import threading
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from grader.checks.a13_composed_layout import (EXAMPLE, KINDS, MODEL, layout_words,
                                               read_layout, read_memory, text)
from grader.checks.result import CheckResult
from grader.checks.support import attempt, result

__all__ = ["Measured", "run_layout", "capstone_model", "by_rule", "problems", "candidates",
           "PREDICT_POINTS", "MISTAKES", "predict_cases", "choose_cases", "comm_by_rule",
           "fitting_layouts", "PROBLEM_HINTS",
           "check_predict_memory", "check_choose_layout", "check_all"]

_LOCK = threading.Lock()        # one fake process group at a time in this process
_BUILDS = itertools.count()


@dataclass(frozen=True)
class Measured:
    params: int
    grads: int
    optimizer: int
    activations: int
    collectives: tuple          # ((op, bytes), ...) in the order the rank started them

    @property
    def memory(self) -> dict:
        return {"params": self.params, "grads": self.grads, "optimizer": self.optimizer,
                "activations": self.activations}

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations

    @property
    def comm_bytes(self) -> int:
        return sum(b for _, b in self.collectives)


def capstone_model(vocab: int, width: int, heads: int, blocks: int):
    """The capstone's transformer (chapters/scripts/capstone_torch.py: pre-norm causal
    attention with bias-free q, k, v, a 4x MLP, final norm and head), seeded."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.wq, self.wk, self.wv = (nn.Linear(width, width, bias=False) for _ in "qkv")
            self.wo = nn.Linear(width, width)
            self.w1, self.w2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            b, s, _ = x.shape
            h = self.norm1(x)
            q, k, v = (w(h).view(b, s, -1, width // heads).transpose(1, 2)
                       for w in (self.wq, self.wk, self.wv))
            scores = q @ k.transpose(-2, -1) / math.sqrt(width // heads)
            future = torch.ones(s, s, dtype=torch.bool).triu(1)
            a = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
            x = x + self.wo(a.transpose(1, 2).reshape(b, s, -1))
            return x + self.w2(F.gelu(self.w1(self.norm2(x))))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.embed = nn.Embedding(vocab, width)
            self.blocks = nn.ModuleDict({str(i): Block() for i in range(blocks)})
            self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)

        def forward(self, x):
            h = self.embed(x) if self.embed is not None else x
            for block in self.blocks.values():
                h = block(h)
            return self.head(self.norm(h)) if self.head is not None else h

    return Model()


def _local(t):
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t._local_tensor
    if isinstance(t, AsyncCollectiveTensor):
        t = t.elem
    return t


def _nbytes(t) -> int:
    t = _local(t)
    return t.numel() * t.element_size()


def _comm_counter():
    """A dispatch mode that records each collective this rank starts and its bytes."""
    import torch
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    c10d = torch.ops.c10d
    wire = {c10d.allreduce_, c10d.allgather_, c10d._allgather_base_, c10d.reduce_scatter_,
            c10d._reduce_scatter_base_, c10d.broadcast_, c10d.alltoall_base_,
            c10d.allgather_into_tensor_coalesced_, c10d.reduce_scatter_tensor_coalesced_}
    functional = set(CommDebugMode().comm_registry)

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if DTensor in types:
                return NotImplemented        # DTensor turns itself into collectives
            packet = getattr(func, "_overloadpacket", None)
            if packet in wire or packet in functional:
                sizes = [t.numel() * t.element_size() for t in tree_leaves((args, kwargs))
                         if isinstance(t, torch.Tensor)]
                name = packet.__name__.strip("_").replace("allreduce", "all_reduce")
                self.ops.append((name, max(sizes, default=0)))
            return func(*args, **(kwargs or {}))

    return Counter()


@lru_cache(maxsize=256)
def run_layout(sizes: tuple, layout: tuple, stage: int) -> Measured:
    """One rank of pipeline stage ``stage`` (data- and tensor-parallel coordinate 0; every
    size divides evenly, so the others hold the same bytes) of ``layout = (replicate,
    shard, tp, pp)`` for the model ``sizes = (vocab, width, heads, blocks, seq, batch,
    micro)``. Cached: it depends on
    nothing else."""
    with _LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _measure(sizes, layout, stage)


def _measure(sizes: tuple, layout: tuple, stage: int) -> Measured:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate  # noqa: F401 - the head's output
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    from torch.testing._internal.distributed.fake_pg import FakeStore

    vocab, width, heads, blocks, seq, batch, micro = sizes
    r, s, t, p = layout
    n = r * s * t * p
    if dist.is_initialized():
        dist.destroy_process_group()
    # A mesh equals any other of the same ranks, shape and names, and DTensor caches
    # shardings by mesh: a later build on the same ranks was handed the groups of an
    # earlier one, destroyed with it. So each build takes ranks no build had before, in a
    # world of offset + n ranks; this process is the rank of (stage, 0, 0, 0).
    offset = next(_BUILDS) * 64
    dist.init_process_group("fake", store=FakeStore(), rank=offset + stage * r * s * t,
                            world_size=offset + n)
    try:
        torch.manual_seed(0)
        mesh = DeviceMesh("cpu", torch.arange(offset, offset + n).reshape(p, r, s, t),
                          mesh_dim_names=("pp", "dp_replicate", "dp_shard", "tp"))
        model = capstone_model(vocab, width, heads, blocks)
        if t > 1:                                        # 1. tensor
            for block in model.blocks.values():
                parallelize_module(block, mesh["tp"], {
                    "wq": ColwiseParallel(), "wk": ColwiseParallel(),
                    "wv": ColwiseParallel(), "wo": RowwiseParallel(),
                    "w1": ColwiseParallel(), "w2": RowwiseParallel()})
            parallelize_module(model, mesh["tp"], {
                "head": ColwiseParallel(output_layouts=Replicate())})
        if p > 1:                                        # 2. pipeline: keep this stage
            per = blocks // p
            for i in range(blocks):
                if not stage * per <= i < (stage + 1) * per:
                    del model.blocks[str(i)]
            if stage > 0:
                model.embed = None
            if stage < p - 1:
                model.norm = model.head = None
        if r * s > 1:                                    # 3. FSDP / HSDP / data
            dp_mesh = mesh["dp_replicate", "dp_shard"] if r > 1 else mesh["dp_shard"]
            for block in model.blocks.values():
                fully_shard(block, mesh=dp_mesh)
            fully_shard(model, mesh=dp_mesh)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        rows = batch // (r * s) // (micro if p > 1 else 1)
        in_flight = min(p - stage, micro) if p > 1 else 1
        saved: dict = {}

        def pack(x):
            local = _local(x)
            params = {_local(q).untyped_storage().data_ptr() for q in model.parameters()}
            storage = local.untyped_storage()
            if storage.data_ptr() not in params:
                saved[storage.data_ptr()] = storage.nbytes()
            return x

        counter = _comm_counter()
        g = torch.Generator().manual_seed(stage)
        with counter:
            outs = []
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
                for _ in range(in_flight):            # 1F1B's forwards before a backward
                    x = (torch.randint(0, vocab, (rows, seq), generator=g) if stage == 0
                         else torch.randn(rows, seq, width, generator=g, requires_grad=True))
                    out = model(x)
                    if stage == p - 1:                 # the loss, as the step computes it
                        y = torch.randint(0, vocab, (rows, seq), generator=g)
                        out = F.cross_entropy(out.flatten(0, 1), y.flatten())
                    outs.append(out)
            activations = sum(saved.values())
            for out in outs:
                out.sum().backward()
            opt.step()
        params = list(model.parameters())
        return Measured(
            params=sum(_nbytes(q) for q in params),
            grads=sum(_nbytes(q.grad) for q in params if q.grad is not None),
            optimizer=sum(_nbytes(v) for state in opt.state.values()
                          for k, v in state.items() if k in ("exp_avg", "exp_avg_sq")),
            activations=activations, collectives=tuple(counter.ops) + _sends(sizes, layout,
                                                                              stage))
    finally:
        dist.destroy_process_group()



def _sends(sizes: tuple, layout: tuple, stage: int) -> tuple:
    """The pipeline's point-to-point transfers that go with the run's micro-batches, which
    it does not make: each one's activations sent on to the next stage, and its gradient
    sent back to the stage before."""
    vocab, width, heads, blocks, seq, batch, micro = sizes
    r, s, t, p = layout
    if p == 1:
        return ()
    rows = batch // (r * s) // micro
    size = rows * seq * width * 4
    return (("send", size),) * (min(p - stage, micro) * ((stage < p - 1) + (stage > 0)))


# ------------------------------------------------------------------------- the rule
SIZES = ("vocab", "width", "heads", "blocks", "seq", "batch", "micro")


def sizes_of(model: dict) -> tuple:
    return tuple(model[k] for k in SIZES)


def by_rule(model: dict, layout: tuple, stage: int = 0, mistakes=frozenset()) -> dict:
    """Rank ``stage x R x S x T``'s bytes by the notebook's rule, exactly as the run
    measures them (the small terms included), or as a typical mistake makes them."""
    V, W, a, B, S, batch, micro = sizes_of(model)
    r, s, t, p = layout
    m = set(mistakes)
    split = 1 if "tp_ignored" in m else t
    whole_part = 0 if "tp_splits_all" in m else 6 * W       # norms, row-parallel biases
    block = (12 * W * W + 4 * W + (6 * W if "tp_splits_all" in m else 0)) / split \
        + whole_part
    nb = B // p
    values = nb * block
    if stage == 0:
        values += V * W
    if stage == p - 1:
        values += (W * V + V) / split + 2 * W
    shard = r * s if "shard_over_replicate" in m else s
    params = 4 * values / (1 if "params_whole" in m else shard)
    grads = 4 * values / (1 if "grads_whole" in m else shard)
    moments = {"no_optimizer": 0, "one_moment": 1}.get(next(iter(m & {"no_optimizer",
                                                                     "one_moment"}), ""), 2)
    optimizer = moments * 4 * values / (1 if "optimizer_whole" in m else shard)
    micro_ = micro if p > 1 else 1
    rows = batch // (1 if "act_not_dp" in m else r * s) // \
        (1 if "whole_batch" in m else micro_)
    flight = (micro_ if "gpipe" in m else min(p - stage, micro_)) if p > 1 else 1
    per_block = 4 * ((4 * W / (t if "act_tp_all" in m else 1))
                     + (12 * W + a * S) / (1 if "tp_ignored" in m else t)) + 16
    per_token = nb * per_block + (8 if stage == 0 else 0)
    if stage == p - 1 and "no_head" not in m:
        per_token += 4 * (2 * W + 2 + V) + 8
    act = flight * (rows * S * per_token + nb * S * S + (4 if stage == p - 1 else 0))
    if "elements" in m:
        params, grads, optimizer, act = params / 4, grads / 4, optimizer / 4, act / 4
    return {"params": params, "grads": grads, "optimizer": optimizer, "activations": act}


def comm_by_rule(model: dict, layout: tuple) -> float:
    """Bytes in rank 0's collectives and sends during the run, as :func:`run_layout` counts
    them (each collective's largest tensor): FSDP gathers each block before its forward
    and its backward and reduce-scatters its gradient, the rest of the model (the root
    unit, kept gathered) once each; replicas all-reduce their shards; tensor parallelism
    all-reduces a block's activations twice forward and four times backward (the three
    column-parallel q, k, v and w1 each sum their input's gradient), and the head adds
    one all-reduce and the gather of its logits; a pipeline sends the activations on."""
    V, W, a, B, S, batch, micro = sizes_of(model)
    r, s, t, p = layout
    nb, f = B // p, (min(p, micro) if p > 1 else 1)
    rows = batch // (r * s) // (micro if p > 1 else 1)
    act = rows * S * W * 4
    unit = 4 * ((12 * W * W + 4 * W) / t + 6 * W)
    root = 4 * (V * W + ((W * V + V) / t + 2 * W if p == 1 else 0))
    out = 0.0
    if s > 1:
        out += f * (3 * nb * unit + 2 * root)
    if r > 1:
        out += f * (nb * unit + root) / s
    if t > 1:
        out += 6 * nb * f * act + (act + rows * S * V * 4 / t if p == 1 else 0)
    if p > 1:
        out += f * act
    return out


def problems(model: dict, layout: tuple, ranks: int) -> list[str]:
    """What rules ``layout`` out for ``model`` on ``ranks`` ranks (empty: nothing)."""
    V, W, a, B, S, batch, micro = sizes_of(model)
    r, s, t, p = layout
    out = []
    if r * s * t * p != ranks:
        out.append(f"{text(layout)} uses {r * s * t * p} ranks, not {ranks}")
    if a % t or W % t or V % t:
        out.append(f"tp={t} does not divide the {a} heads (and width {W}, vocabulary {V})")
    if B % p:
        out.append(f"{B} blocks do not cut into {p} pipeline stages")
    if batch % (r * s) or (p > 1 and batch // (r * s) % micro):
        out.append(f"{batch} sequences do not split over {r * s} data-parallel ranks"
                   + (f" and {micro} micro-batches" if p > 1 else ""))
    if s > 1 and (W % (t * s) or V % (t * s)):
        out.append(f"dp_shard={s} does not divide the tensors' rows (width {W}, "
                   f"vocabulary {V}, after tp={t})")
    used = sum(d > 1 for d in layout)
    if used not in (2, 3):
        out.append(f"{text(layout)} uses {used} axes: compose two or three")
    return out


# the hint for a problem of :func:`problems`, by the words that name it
PROBLEM_HINTS = {
    "ranks, not": "the four degrees multiply to the number of ranks",
    "tp=": "tensor parallelism splits the heads: tp must divide the heads (and the width "
           "and the vocabulary)",
    "pipeline stages": "each pipeline stage takes whole blocks: pp must divide the blocks",
    "sequences": "the data-parallel ranks (replicate x shard) must divide the batch, and "
                 "with a pipeline each rank's share must cut into micro micro-batches",
    "dp_shard=": "FSDP cuts every tensor's rows: dp_shard must divide the width and the "
                 "vocabulary left on a tensor-parallel rank",
    "axes": "the task asks for a 2-D or 3-D layout: two or three degrees above 1",
}


def _factors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(model: dict, ranks: int) -> list[tuple]:
    """Every layout of ``ranks`` ranks the model's sizes allow."""
    return [(r, s, t, p) for r in _factors(ranks) for s in _factors(ranks // r)
            for t in _factors(ranks // (r * s)) for p in [ranks // (r * s * t)]
            if not problems(model, (r, s, t, p), ranks)]


def fitting_layouts(model: dict, ranks: int, budget: float) -> list[tuple]:
    """The layouts allowed whose every rank is within ``budget`` by the rule."""
    return [lay for lay in candidates(model, ranks)
            if max(sum(by_rule(model, lay, k).values()) for k in range(lay[3])) <= budget]


def peak(model: dict, layout: tuple) -> tuple[int, int]:
    """The largest rank's measured total and its stage (every stage built)."""
    totals = [run_layout(sizes_of(model), layout, k).total for k in range(layout[3])]
    return max(totals), totals.index(max(totals))


# ------------------------------------------------------------------------- the cases
MODELS = [
    {"vocab": 64, "width": 32, "heads": 4, "blocks": 4, "seq": 16, "batch": 8, "micro": 4},
    {"vocab": 128, "width": 32, "heads": 8, "blocks": 2, "seq": 8, "batch": 16, "micro": 4},
    {"vocab": 96, "width": 48, "heads": 6, "blocks": 4, "seq": 12, "batch": 12, "micro": 3},
]
# layouts whose mistakes show: FSDP, HSDP, TP, PP with more micro-batches than stages
PREDICT_LAYOUTS = [(1, 2, 2, 1), (2, 2, 1, 1), (1, 2, 1, 2), (2, 1, 2, 1), (1, 1, 2, 2),
           (2, 2, 2, 1), (1, 2, 2, 2)]


def predict_cases() -> list[tuple[dict, tuple]]:
    """Four (model, layout) cases from the course's draw, never the notebook's example:
    HSDP, tensor and pipeline parallelism each among them."""
    from grader.grading.hidden import cases

    rng = cases("a13_composed_layout", "predict")
    out = []
    for want in ((2, 2, 1, 1), None, None, None):
        while True:
            model = rng.choice(MODELS)
            layout = want or rng.choice(PREDICT_LAYOUTS)
            if not [x for x in problems(model, layout, layout[0] * layout[1] * layout[2]
                                        * layout[3]) if "axes" not in x] and \
                    (model, layout) not in out + [(MODEL, EXAMPLE["layout"])]:
                break
        out.append((model, layout))
    if not any(lay[2] > 1 for _, lay in out):
        out[1] = (MODELS[1], (1, 2, 2, 1))
    if not any(lay[3] > 1 for _, lay in out):
        out[2] = (MODELS[1], (1, 2, 1, 2))
    return out


def choose_cases() -> list[tuple[dict, int, int]]:
    """Two (model, ranks, budget) cases on 8 ranks: the budget halfway between the largest
    ranks of two layouts next to each other in the lower half (sorted by that rank's
    bytes, at least 5 % apart), so that some layouts fit and some do not, and an answer
    that leaves out the masks and token ids (2 % at most) sorts them the same."""
    from grader.grading.hidden import cases

    rng = cases("a13_composed_layout", "choose")
    out = []
    for model in rng.sample(MODELS, 2):
        peaks = sorted(max(sum(by_rule(model, lay, k).values()) for k in range(lay[3]))
                       for lay in candidates(model, 8))
        gaps = [k for k in range(len(peaks) // 2) if peaks[k + 1] > 1.05 * peaks[k]]
        k = rng.choice(gaps)
        out.append((model, 8, int((peaks[k] + peaks[k + 1]) / 2)))
    return out


# ------------------------------------------------------------------------- the hints
MISTAKES = {
    "no_optimizer": "Adam keeps two moments per parameter: the optimizer state is twice "
                    "the parameters' bytes",
    "one_moment": "Adam keeps two moments per parameter (exp_avg and exp_avg_sq), not one",
    "grads_whole": "FSDP reduce-scatters the gradients: each rank keeps its 1/dp_shard "
                   "share, as of the parameters",
    "params_whole": "FSDP keeps 1/dp_shard of each parameter on a rank between steps (the "
                    "gathered copies are freed)",
    "optimizer_whole": "the optimizer updates only the rank's shard: its state is "
                       "1/dp_shard too",
    "shard_over_replicate": "HSDP shards over dp_shard only: the dp_replicate groups "
                            "each hold a whole sharded copy (divide by dp_shard, not "
                            "dp_replicate x dp_shard)",
    "tp_splits_all": "tensor parallelism splits a block's matrices and the first MLP "
                     "bias; its LayerNorms and the row-parallel biases of wo and w2 stay "
                     "whole on every tensor-parallel rank",
    "tp_ignored": "tensor parallelism splits every block's matrices over tp ranks",
    "gpipe": "1F1B keeps at most min(pp - stage, micro) micro-batches in flight on a "
             "stage, not all of them (that is GPipe)",
    "whole_batch": "with a pipeline a forward pass runs one micro-batch: batch / "
                   "(dp_replicate x dp_shard) / micro sequences",
    "act_not_dp": "each data-parallel rank (dp_replicate x dp_shard of them) runs its own "
                  "share of the batch",
    "act_tp_all": "the LayerNorms' and the first products' inputs are whole on every "
                  "tensor-parallel rank: only the heads' part and the MLP's wide part split",
    "no_head": "without a pipeline rank 0 also keeps the head's input and the loss's "
               "log-softmax over the vocabulary for backward",
    "elements": "bytes, not values: 4 bytes per float32 value",
}
PREDICT_POINTS = {"params": 2, "grads": 1, "optimizer": 1, "activations": 2}
KIND_RTOL = {"params": 0.005, "grads": 0.005, "optimizer": 0.005, "activations": 0.02}

def _close(seen: float, want: float, kind: str) -> bool:
    return abs(seen - want) <= KIND_RTOL[kind] * want + 0.5


def _hint(kind: str, seen: dict, keys: list, stage: int = 0) -> str:
    """The mistake whose variant of the rule gives every case's ``kind`` the answer gave
    (and changes at least one)."""
    for m in MISTAKES:
        variants = [by_rule(model, lay, stage, {m})[kind] for model, lay in keys]
        rights = [by_rule(model, lay, stage)[kind] for model, lay in keys]
        if any(not _close(v, w, kind) for v, w in zip(variants, rights)) and all(
                _close(seen[i], v, kind) for i, v in enumerate(variants)):
            return MISTAKES[m]
    return {"params": "count each tensor's bytes on rank 0: the table of the task, split "
                      "by tp where it says so, then by dp_shard",
            "activations": "tokens of one micro-batch on this rank x micro-batches in "
                           "flight x (blocks on the stage x the bytes per token of a "
                           "block, + the head's on the last stage)"}.get(
        kind, "gradients are the parameters' size and shards; Adam keeps two moments")


def _over_budget_hint(model: dict, layout: tuple, stage: int, predict, framework: str
                      ) -> str:
    """Why the layout seemed to fit: what the student's own ``predict_memory`` says of the
    stage over the budget, the kind it undercounts most and the mistake that reproduces
    it; without ``predict_memory`` (or when it raises), where the bytes are."""
    measured = run_layout(sizes_of(model), layout, stage).memory
    said, _ = attempt(read_memory, predict, dict(model), layout_words(layout, framework),
                      stage) if predict is not None else (None, "")
    if said is None:
        big = max(measured, key=measured.get)
        return (f"every rank counts, each pipeline stage's too: stage {stage} holds "
                f"{measured[big]:,} bytes of {big} alone")
    kind = max(KINDS, key=lambda k: measured[k] - said[k])
    return (f"your predict_memory gives stage {stage} {said[kind]:,.0f} bytes of {kind}, "
            f"measured {measured[kind]:,}: "
            + _hint(kind, {0: said[kind]}, [(model, layout)], stage))


def check_predict_memory(fn: Callable, framework: str = "torch") -> CheckResult:
    """6 points: params (2), grads (1), optimizer (1), activations (2), each on every
    case; a case whose call raises costs every kind."""
    name = "a13: predict_memory is what rank 0 holds when the grader runs the layout"
    keys = predict_cases()
    seen, errors = {}, {}
    for i, (model, layout) in enumerate(keys):
        seen[i], errors[i] = attempt(read_memory, fn, dict(model),
                                     layout_words(layout, framework))
    measured = [run_layout(sizes_of(model), layout, 0).memory for model, layout in keys]
    parts = []
    for kind in KINDS:
        bad = [i for i in errors if errors[i]]
        if bad:
            model, layout = keys[bad[0]]
            parts.append((PREDICT_POINTS[kind], False, f"{kind}: {errors[bad[0]]}",
                          f"four numbers for {text(layout)}", f"{len(bad)} of "
                          f"{len(keys)} calls failed", "call predict_memory on that layout "
                          "in a cell of your own to see the error"))
            continue
        wrong = [i for i in seen if not _close(seen[i][kind], measured[i][kind], kind)]
        if not wrong:
            parts.append((PREDICT_POINTS[kind], True, "", "", "", ""))
            continue
        i = wrong[0]
        model, layout = keys[i]
        parts.append((PREDICT_POINTS[kind], False,
                      f"{kind}: not what rank 0 holds in {text(layout)}",
                      f"{measured[i][kind]:,} bytes measured (model {model})",
                      f"{seen[i][kind]:,.0f}",
                      _hint(kind, {j: seen[j][kind] for j in seen}, keys)))
    return result(name, 6, parts, f"all four kinds match the measurement on {len(keys)} "
                                  "layouts")


def check_choose_layout(fn: Callable, framework: str = "torch",
                        predict: Callable | None = None) -> CheckResult:
    """4 points: a layout the sizes allow (1), every rank within the budget as measured
    (2), the fewest bytes communicated among the layouts that fit (1); every case.
    ``predict``, the student's ``predict_memory``, only words the hint of a layout over
    the budget (what it says of that layout, against the measurement)."""
    name = "a13: choose_layout fits the budget with the least communication"
    keys = choose_cases()
    got = [attempt(lambda x: read_layout(x, framework), fn, dict(model), ranks, budget)
           for model, ranks, budget in keys]
    fail = next(((i, why) for i, (_, why) in enumerate(got) if why), None)
    if fail:
        model, ranks, budget = keys[fail[0]]
        return result(name, 4, [(4, False, fail[1], f"a layout of {ranks} ranks",
                                 f"for a budget of {budget:,} bytes", "return a dict of "
                                 "the four degrees (or 'RxSxTxP') for every call")], "")
    structure, fits, least = [], [], []
    for (model, ranks, budget), (layout, _) in zip(keys, got):
        why = problems(model, layout, ranks)
        if why:
            structure.append((f"{text(layout)} is not a layout of this model on {ranks} "
                              f"ranks: {why[0]}", next(h for k, h in PROBLEM_HINTS.items()
                                                       if k in why[0])))
            continue
        top, stage = peak(model, layout)
        if top > budget:
            m = run_layout(sizes_of(model), layout, stage).memory
            big = max(m, key=m.get)
            fits.append((f"{text(layout)} needs {top:,} bytes on pipeline stage {stage} "
                         f"(its {big} {m[big]:,}), over the budget of {budget:,}",
                         _over_budget_hint(model, layout, stage, predict, framework)))
            continue
        # the others are priced by the rule, which the course's tests hold equal to
        # this run on every layout of these models: building them all would take seconds
        mine = run_layout(sizes_of(model), layout, 0).comm_bytes
        best = min(fitting_layouts(model, ranks, budget),
                   key=lambda lay: (comm_by_rule(model, lay), lay))
        lowest = int(comm_by_rule(model, best))
        if mine > lowest:
            least.append((f"{text(layout)} fits, and rank 0 communicates {mine:,} bytes in "
                          f"a step; {text(best)} fits with {lowest:,}",
                          "of the layouts that fit, take the one that moves the fewest "
                          "bytes: FSDP gathers every parameter twice and reduce-scatters "
                          "its gradient, tensor parallelism all-reduces activations in "
                          "every block, a pipeline sends only the activations between "
                          "stages"))
    parts = [(1, not structure, structure[0][0] if structure else "",
              "a layout the model's sizes allow, of two or three axes", "",
              structure[0][1] if structure else "")]
    parts.append((2, not (structure or fits), fits[0][0] if fits else
                  "not built: the layout is not valid", "every rank within the budget", "",
                  fits[0][1] if fits else "fix the layout first"))
    parts.append((1, not (structure or fits or least), least[0][0] if least else
                  "not compared: the layout does not fit", "the least communication among "
                  "the layouts that fit", "", least[0][1] if least else "make it fit "
                  "first"))
    return result(name, 4, parts, f"every layout fits, and communicates the least, in all "
                                  f"{len(keys)} cases")


def check_all(predict_memory: Callable, choose_layout: Callable,
              framework: str = "torch") -> list[CheckResult]:
    return [check_predict_memory(predict_memory, framework),
            check_choose_layout(choose_layout, framework, predict_memory)]
