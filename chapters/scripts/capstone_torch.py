"""One small transformer, trained under several layouts composed axis by axis, as
torchtitan's ``parallelize`` composes them: tensor parallelism, then the pipeline, then
FSDP/data parallelism, each function taking the mesh dimension it owns.

    torchrun --nproc_per_node 4 capstone_torch.py --layouts 1x4x1x1 2x2x1x1 1x2x2x1
    torchrun --nproc_per_node 8 capstone_torch.py --layouts 2x1x2x2 --out runs.json

A layout "RxSxTxP" is replicate x shard x tensor x pipeline: R groups of whole
copies (data parallel across them), each copy sharded over S ranks (FSDP; R and S
together are HSDP), every block's matrices split over T ranks (tensor parallel) and
the blocks cut into P pipeline stages. R x S x T x P is the number of ranks. Every
layout trains the same model from the same weights on the same batches, in float32,
next to the loss of one process training the whole model alone; "--control"
trains one more layout with its gradients averaged twice, a bug the loss must show.
Each layout also records what rank 0 sent in a step (CommDebugMode), every rank's
FLOPs (FlopCounterMode's formulas) and rank 0's peak memory (MemTracker).
"""
import argparse
import contextlib
import json
import math
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)
from torch.utils.flop_counter import FlopCounterMode

# CommDebugMode's module tracker warns when a module's input needs no gradient
warnings.filterwarnings("ignore", message="Full backward hook")
warnings.filterwarnings("ignore", message=".*all_gather_into_tensor.*deprecated")
# FSDP warns that the model returns a view (nn.Linear's output on 3-D input), which an
# in-place op would break; the loss reads it out of place
warnings.filterwarnings("ignore", message="FSDP2-wrapped module")

VOCAB, WIDTH, HEADS, BLOCKS, SEQ = 64, 32, 4, 2, 16   # sizes of the model
BATCH, STEPS, LR, MICRO = 8, 8, 0.5, 2   # sequences per step, steps, SGD's rate,
#                                          micro-batches per step of a pipeline


class Block(nn.Module):
    """Pre-norm causal self-attention, then an MLP. Queries, keys and values are
    three products, so that a tensor-parallel rank's share of each is its heads."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        # no bias on q, k, v: a key's bias adds the same to every score of a row
        self.wq, self.wk, self.wv = (nn.Linear(WIDTH, WIDTH, bias=False) for _ in "qkv")
        self.wo = nn.Linear(WIDTH, WIDTH)
        self.w1, self.w2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        # -1: the heads this rank holds (all of them, or its tensor-parallel share)
        q, k, v = (w(h).view(b, s, -1, WIDTH // HEADS).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        # the attention's two products written out: FlopCounterMode has no formula
        # for the CPU kernel of scaled_dot_product_attention
        scores = q @ k.transpose(-2, -1) / math.sqrt(WIDTH // HEADS)
        future = torch.ones(s, s, dtype=torch.bool).triu(1)
        a = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.w2(F.gelu(self.w1(self.norm2(x))))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)            # the same initial weights in every process
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleDict({str(i): Block() for i in range(BLOCKS)})
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) if self.embed is not None else x   # a stage may lack it
        for block in self.blocks.values():
            h = block(h)
        return self.head(self.norm(h)) if self.head is not None else h


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s BATCH sequences: token t+1 follows from token t by a rule."""
    g = torch.Generator().manual_seed(step)
    start = torch.randint(0, VOCAB, (BATCH, 1), generator=g)
    stride = torch.randint(1, 8, (BATCH, 1), generator=g)
    tokens = (start + stride * torch.arange(SEQ + 1)) % VOCAB
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


C10D = torch.ops.c10d
WIRE = {C10D.allreduce_, C10D.allgather_, C10D._allgather_base_, C10D.reduce_scatter_,
        C10D._reduce_scatter_base_, C10D.broadcast_, C10D.alltoall_base_,
        C10D.allgather_into_tensor_coalesced_, C10D.reduce_scatter_tensor_coalesced_,
        C10D.send, C10D.recv_}


class CommSizes(CommDebugMode):
    """CommDebugMode's dispatch-level count of collectives, with the bytes of each
    (its largest tensor: an all-gather's output, a reduce-scatter's input) and the
    pipeline's sends and receives, which CommDebugMode does not count. Its tracker of
    modules stays off: it loses its place in the stages a pipeline schedule runs.

    It also counts this rank's FLOPs with FlopCounterMode's formulas, on the local
    tensors: FlopCounterMode itself, entered here, would see a DTensor's product at
    its global shape, the whole product on every tensor-parallel rank."""

    def __enter__(self):
        self.ops = []                                   # (name, bytes), in order
        self.counter, self.flops = FlopCounterMode(display=False), 0
        torch.utils._python_dispatch.TorchDispatchMode.__enter__(self)
        return self

    def __exit__(self, *args):
        torch.utils._python_dispatch.TorchDispatchMode.__exit__(self, *args)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if DTensor in types:
            return NotImplemented          # let DTensor turn itself into collectives
        out = func(*args, **(kwargs or {}))
        packet = getattr(func, "_overloadpacket", None)
        if packet in self.counter.flop_registry:
            self.flops += self.counter.flop_registry[packet](*args, **(kwargs or {}),
                                                            out_val=out)
        if packet in WIRE or packet in self.comm_registry:
            flat = torch.utils._pytree.tree_leaves((args, kwargs))
            size = max(t.numel() * t.element_size() for t in flat
                       if isinstance(t, torch.Tensor))
            self.ops.append((packet.__name__.strip("_"), size))
        return out


# ---------------------------------------------------------------- one function per axis
def apply_tp(model: Model, tp_mesh) -> None:
    """Megatron's split of every block (column-parallel q, k, v and w1, row-parallel wo
    and w2), the embedding split by vocabulary rows and the head by its outputs."""
    if tp_mesh.size() == 1:
        return
    for block in model.blocks.values():
        parallelize_module(block, tp_mesh, {
            "wq": ColwiseParallel(), "wk": ColwiseParallel(), "wv": ColwiseParallel(),
            "wo": RowwiseParallel(), "w1": ColwiseParallel(), "w2": RowwiseParallel()})
    parallelize_module(model, tp_mesh, {
        "embed": RowwiseParallel(input_layouts=Replicate()),
        "head": ColwiseParallel(output_layouts=Replicate())})


def apply_pp(model: Model, pp_mesh) -> Model:
    """Keep this rank's stage: its share of the blocks, the embedding on the first
    stage, the final norm and head on the last."""
    stages, stage = pp_mesh.size(), pp_mesh.get_local_rank()
    if stages == 1:
        return model
    per = BLOCKS // stages
    for i in range(BLOCKS):
        if not stage * per <= i < (stage + 1) * per:
            del model.blocks[str(i)]
    if stage > 0:
        model.embed = None
    if stage < stages - 1:
        model.norm = model.head = None
    return model


def apply_fsdp(model: Model, dp_mesh) -> None:
    """FSDP2 on each block, then on the rest; a 2-D (replicate, shard) mesh is HSDP:
    shards within a row, gradients all-reduced across rows."""
    if dp_mesh.size() == 1:
        return
    for block in model.blocks.values():
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)


# ---------------------------------------------------------------- one layout's training
def parse(layout: str) -> dict:
    r, s, t, p = (int(n) for n in layout.split("x"))
    return {"replicate": r, "shard": s, "tp": t, "pp": p}


def train(layout: str, control: bool = False) -> dict:
    d = parse(layout)
    mesh = init_device_mesh("cpu", (d["pp"], d["replicate"], d["shard"], d["tp"]),
                            mesh_dim_names=("pp", "dp_replicate", "dp_shard", "tp"))
    dp = d["replicate"] * d["shard"]
    model = Model()
    apply_tp(model, mesh["tp"])                          # 1. tensor
    model = apply_pp(model, mesh["pp"])                  # 2. pipeline
    # 3. FSDP / data: over dp_shard alone, or a 2-D (dp_replicate, dp_shard) mesh
    apply_fsdp(model, mesh["dp_replicate", "dp_shard"] if d["replicate"] > 1
               else mesh["dp_shard"])
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    stage_index, stages = mesh["pp"].get_local_rank(), d["pp"]
    first, last = stage_index == 0, stage_index == stages - 1
    if stages > 1:
        # the shapes each stage receives and sends, given: the schedule then need
        # not find them by running the stage (which FSDP's hooks refuse)
        mb = BATCH // dp // MICRO
        acts = torch.empty(mb, SEQ, WIDTH, requires_grad=True)
        stage = PipelineStage(
            model, stage_index, stages, torch.device("cpu"),
            input_args=torch.zeros(mb, SEQ, dtype=torch.long) if first else acts,
            output_args=torch.empty(mb, SEQ, VOCAB) if last else acts,
            group=mesh["pp"].get_group())
        # each micro-batch's loss is its mean; the schedule divides the summed
        # gradients by the number of micro-batches
        schedule = Schedule1F1B(stage, n_microbatches=MICRO, loss_fn=loss_fn)
    r, s = mesh["dp_replicate"].get_local_rank(), mesh["dp_shard"].get_local_rank()
    part = r * d["shard"] + s                      # this rank's share of the batch
    rows = slice(part * BATCH // dp, (part + 1) * BATCH // dp)

    losses, times, counts = [], [], {}
    # peak bytes of this rank's tensors, by kind, in the last step (MemTracker slows
    # it down: it is left out of the times); MemTracker refuses a module called more
    # than once a step, as a pipeline stage is (once per micro-batch)
    memory = MemTracker() if stages == 1 else None
    if memory:
        memory.track_external(model, opt)
    for step in range(STEPS):
        x, y = (t[rows] for t in batch(step))
        dist.barrier()
        start = time.perf_counter()
        with CommSizes() as comm, (
                memory if memory and step == STEPS - 1 else contextlib.nullcontext()):
            if stages == 1:
                loss = loss_fn(model(x), y)
                loss.backward()
            else:
                out = []
                schedule.step(*((x,) if first else ()), **(
                    {"target": y, "losses": out} if last else {}))
                loss = torch.stack(out).mean() if last else None
            if control:           # the bug: divide by the data-parallel ranks again
                for p in model.parameters():
                    p.grad.div_(dp)
            opt.step()
            opt.zero_grad()
        times.append(time.perf_counter() - start)
        if step == 1:            # a step after the first, whose caches are warm
            counts, flops = comm.ops, comm.flops
        # the batch's mean loss: the last stage's mean over its rows, averaged over
        # the data-parallel ranks (one tensor-parallel rank of each counts)
        mine = loss.detach() / dp if last and mesh["tp"].get_local_rank() == 0 else None
        total = torch.zeros(()) if mine is None else mine.clone()
        dist.all_reduce(total)
        losses.append(total.item())
    peak = memory.get_tracker_snapshot("peak")[torch.device("cpu")] if memory else {}
    peak = {k if isinstance(k, str) else k.value: v for k, v in peak.items()}
    every = [0] * dist.get_world_size()
    dist.all_gather_object(every, flops)            # each rank's count of step 1
    return {"layout": layout, **d, "control": control, "losses": losses,
            "step_s": times, "collectives": counts, "flops": every,
            "peak_bytes": peak,
            "state_bytes": sum(p.to_local().numel() * 4 if isinstance(p, DTensor)
                               else p.numel() * 4 for p in model.parameters())}


def alone() -> tuple[list[float], int]:
    """The whole model in one process, whole batches: the reference loss curve, and
    the FLOPs of one step (forward and backward) as FlopCounterMode counts them."""
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    out = []
    counter = FlopCounterMode(display=False)
    for step in range(STEPS):
        with counter if step == 1 else contextlib.nullcontext():
            loss = loss_fn(model(batch(step)[0]), batch(step)[1])
            loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return out, counter.get_total_flops()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", nargs="+", default=["1x4x1x1"])
    ap.add_argument("--control", default=None, help="a layout to train with its "
                    "gradients averaged twice")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    ref, ref_flops = alone() if rank == 0 else (None, None)   # rank 0 compares
    runs = []
    jobs = [(layout, False) for layout in args.layouts]
    jobs += [(args.control, True)] if args.control else []
    for layout, control in jobs:
        d = parse(layout)
        if math.prod(d.values()) != world:
            raise SystemExit(f"layout {layout} needs {math.prod(d.values())} ranks, "
                             f"not the {world} this launch has")
        start = time.perf_counter()
        run = train(layout, control)
        run["wall_s"] = time.perf_counter() - start
        runs.append(run)
        if rank == 0:
            worst = max(abs(a - b) / b for a, b in zip(run["losses"], ref))
            print(f"{layout}{' (gradients averaged twice)' if control else ''}: "
                  f"loss {run['losses'][0]:.4f} -> {run['losses'][-1]:.4f}, "
                  f"at most {worst:.1e} off one process")
    if rank == 0:
        print(f"one process: loss {ref[0]:.4f} -> {ref[-1]:.4f}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "reference": ref, "runs": runs,
                           "reference_flops": ref_flops,
                           "sizes": {"vocab": VOCAB, "width": WIDTH, "heads": HEADS,
                                     "blocks": BLOCKS, "seq": SEQ, "batch": BATCH,
                                     "steps": STEPS, "lr": LR, "micro": MICRO}}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
