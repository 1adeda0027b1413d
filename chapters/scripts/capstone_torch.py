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

The whole training state (weights, momentum, the schedule's position, the data's
position and generator, the RNG) is checkpointed with torch.distributed.checkpoint:

    torchrun --nproc_per_node 4 capstone_torch.py --layouts 1x1x2x2 --ckpt-dir ck
    torchrun --nproc_per_node 2 capstone_torch.py --resume 1x2x1x1 ck/1x1x2x2
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nproc_per_node 4 --max-restarts 1 \\
        capstone_torch.py --layouts 1x2x1x2 --ckpt-dir ck --save-every 2 --kill-at 6

"--ckpt-dir" saves each layout every "--save-every" steps into DIR/<layout>/step-N,
and starts a layout from the newest complete checkpoint there (after a crash, the
restarted launch goes on where it was); "--resume LAYOUT DIR" trains LAYOUT from the
newest complete checkpoint in DIR, saved in any layout on any number of ranks; a save
writes into tmp-step-N and only the rename to step-N, once every rank has written,
makes it complete. "--kill-at S" kills a rank at step S of a run started from step 0,
after its share of step S's checkpoint is written and before the checkpoint is
committed. (Without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, torchrun 2.13 keeps one store
for every attempt, and here the restarted ranks' gloo group failed to connect in 5 of 8
tries.)
"""
import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict,
                                                     set_state_dict)
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
# torch.distributed.checkpoint used in one process (the page's mismatch) says it is
warnings.filterwarnings("ignore", message="torch.distributed is disabled")

VOCAB, WIDTH, HEADS, BLOCKS, SEQ = 64, 32, 4, 2, 16   # sizes of the model
BATCH, STEPS, MICRO = 8, 8, 2   # sequences per step, steps, micro-batches per step
#                                 of a pipeline
LR, MOMENTUM = 0.4, 0.5         # SGD's rate (at the start of its cosine schedule)


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


def optimizer(params) -> tuple[torch.optim.Optimizer,
                              torch.optim.lr_scheduler.LRScheduler]:
    """SGD with momentum on a cosine schedule: the momentum buffers and the schedule's
    position are state a resumed run needs. Not Adam: a gradient scaled by a constant
    (averaged twice) would take almost the same step, and the control would pass."""
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, STEPS, eta_min=LR / 10)


class Batches:
    """The training data, a stream: each step draws BATCH sequences (token t+1 follows
    from token t by a rule) from the stream's generator. Its position and generator are
    training state, as a data loader's are: a resumed run must draw what the
    uninterrupted run drew. Every rank draws the whole batch and keeps its rows."""

    def __init__(self) -> None:
        self.generator, self.position = torch.Generator().manual_seed(0), 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        start = torch.randint(0, VOCAB, (BATCH, 1), generator=self.generator)
        stride = torch.randint(1, 8, (BATCH, 1), generator=self.generator)
        tokens = (start + stride * torch.arange(SEQ + 1)) % VOCAB
        self.position += 1
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def state_dict(self) -> dict:
        return {"position": self.position, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]
        self.generator.set_state(state["generator"])


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


# ---------------------------------------------------------- the whole state, saved
# the optimizer's state keyed by parameter name, flat: a pipeline stage's share of it
# loads into any other cut of the blocks
OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def state_of(model, opt, sched, data: Batches, layout: str) -> dict:
    """Everything a resumed run needs, as torch.distributed.checkpoint saves it: each
    rank's shards of the weights and momentum (DTensors: the checkpoint records their
    global shapes and where each shard lies), and what every rank holds alike."""
    weights, optim = get_state_dict(model, opt, options=OPTIONS)
    return {"model": weights, "optim": optim, "schedule": sched.state_dict(),
            "data": data.state_dict(), "rng": torch.get_rng_state(),
            "saved_by": {"layout": layout, "ranks": dist.get_world_size()
                         if dist.is_initialized() else 1}}


def complete(folder) -> list[Path]:
    """The committed checkpoints in ``folder``, oldest first: ``step-N`` folders with
    the metadata torch.distributed.checkpoint writes last. An interrupted save is a
    ``tmp-step-N`` folder: never read."""
    found = Path(folder).glob("step-*") if Path(folder).is_dir() else []
    return sorted(p for p in found if (p / ".metadata").is_file())


class Saver:
    """Saves into ``tmp-step-N`` and commits by renaming it to ``step-N`` once every
    rank has written its share (a rename is atomic: a reader sees the whole checkpoint
    or none of it). Asynchronous: dcp.async_save copies the state and returns, and its
    writes go on beside the training, over a process group of their own; the commit
    waits for them, before the next save or at the end."""

    def __init__(self, folder, asynchronous: bool = False) -> None:
        self.folder, self.asynchronous = Path(folder), asynchronous
        self.group = dist.new_group(backend="gloo") if asynchronous else None
        self.pending = None
        self.seconds = []          # per save: (training stopped for, until committed)

    def save(self, state: dict, step: int, die: bool = False) -> None:
        self.commit()              # one save at a time
        tmp = self.folder / f"tmp-step-{step:06d}"
        if rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)        # an interrupted save's
            tmp.mkdir(parents=True)
        barrier()
        start = time.perf_counter()
        if self.asynchronous:
            future = dcp.async_save(state, checkpoint_id=tmp, process_group=self.group)
        else:
            future = dcp.save(state, checkpoint_id=tmp)
        self.pending = (future, tmp, start, time.perf_counter() - start)
        if die:          # the demonstration: this rank dies, its share written
            if self.asynchronous:
                future.result()
            os.kill(os.getpid(), signal.SIGKILL)
        if not self.asynchronous:
            self.commit()

    def commit(self) -> None:
        if self.pending is None:
            return
        future, tmp, start, stopped = self.pending
        if self.asynchronous:
            future.result()
        barrier()                  # every rank has written its share
        if rank() == 0:
            os.rename(tmp, tmp.with_name(tmp.name.removeprefix("tmp-")))
        self.seconds.append((stopped, time.perf_counter() - start))
        self.pending = None


class CheckpointMismatch(ValueError):
    """A checkpoint that does not fit the model it is loaded into."""


def misfits(state: dict, metadata) -> tuple[set, list[str]]:
    """The tensors this rank needs, and what in the checkpoint does not fit them: a
    tensor it lacks ("missing"), holds at another global shape, or a part of the state
    it lacks altogether."""
    saved, needed, problems = metadata.state_dict_metadata, set(), []
    for part in ("model", "optim"):
        for name, t in state[part].items():
            if isinstance(t, torch.Tensor):
                key = f"{part}.{name}"
                needed.add(key)
                if key not in saved:
                    problems.append(f"missing {key}")
                elif list(getattr(saved[key], "size", [])) != list(t.shape):
                    problems.append(f"{key} is {list(saved[key].size)} in the "
                                    f"checkpoint, {list(t.shape)} in the model")
    for part in ("schedule", "data", "rng"):
        if not any(k == part or k.startswith(part + ".") for k in saved):
            problems.append(f"missing the {part} state")
    return needed, problems


def mismatch_words(problems: list[str]) -> str:
    """The problems, shapes first, each kind cut to its first few (a missing block is
    a dozen missing tensors)."""
    kinds = [[p for p in problems if " is [" in p],
             [p for p in problems if p.startswith("missing")],
             [p for p in problems if p.endswith("not in the model")]]
    return "; ".join(", ".join(k[:3]) + (f" (and {len(k) - 3} more)" if len(k) > 3
                                          else "") for k in kinds if k)


def load(path, model, opt, sched, data: Batches, layout: str) -> dict:
    """Load the checkpoint at ``path`` (saved in any layout) into this layout's state;
    first check on every rank that it fits, and stop with what does not, before
    anything is read into the model. Loading only reads the checkpoint's files."""
    start = time.perf_counter()
    state = state_of(model, opt, sched, data, layout)
    needed, problems = misfits(state, dcp.FileSystemReader(path).read_metadata())
    every = [(needed, problems)]
    if dist.is_initialized():
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, (needed, problems))
    problems = sorted({p for _, ps in every for p in ps})
    saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    wanted = set().union(*(n for n, _ in every))
    problems += [f"{k} is not in the model" for k in sorted(saved)
                 if k.startswith(("model.", "optim.state.")) and k not in wanted]
    if problems:
        raise CheckpointMismatch(f"checkpoint {path} does not fit this model "
                                 f"({layout}): {mismatch_words(problems)}")
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"], options=OPTIONS)
    sched.load_state_dict(state["schedule"])
    data.load_state_dict(state["data"])
    torch.set_rng_state(state["rng"])
    return {"from": str(path), "step": data.position, "saved_by": state["saved_by"],
            "load_s": time.perf_counter() - start}


# ---------------------------------------------------------------- one layout's training
def parse(layout: str) -> dict:
    r, s, t, p = (int(n) for n in layout.split("x"))
    return {"replicate": r, "shard": s, "tp": t, "pp": p}


def train(layout: str, control: bool = False, ckpt: str | None = None, every: int = 4,
          asynchronous: bool = False, resume: str | None = None,
          kill_at: int | None = None, kill_rank: int = -1) -> dict:
    """Train ``layout`` for STEPS steps; with ``ckpt``, save its whole state every
    ``every`` steps into ``ckpt`` and start from the newest complete checkpoint there;
    with ``resume``, start from the newest complete checkpoint in that folder."""
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
    opt, sched = optimizer(model.parameters())
    data = Batches()
    loaded, skipped = None, []
    source = resume or ckpt
    if source and complete(source):
        loaded = load(complete(source)[-1], model, opt, sched, data, layout)
        # interrupted saves, passed over: whether all their files were written or not
        skipped = [{"name": p.name, "metadata": (p / ".metadata").is_file()}
                   for p in sorted(Path(source).glob("tmp-step-*"))]
    begin = data.position
    saver = Saver(Path(ckpt), asynchronous) if ckpt else None

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

    losses, rates, times, counts, flops = [], [], [], {}, 0
    # peak bytes of this rank's tensors, by kind, in the last step (MemTracker slows
    # it down: it is left out of the times); MemTracker refuses a module called more
    # than once a step, as a pipeline stage is (once per micro-batch)
    memory = MemTracker() if stages == 1 else None
    if memory:
        memory.track_external(model, opt)
    log = None
    if ckpt and rank() == 0:     # the run's log, kept across restarts
        Path(ckpt).mkdir(parents=True, exist_ok=True)
        log = open(Path(ckpt) / "losses.txt", "a")
    for step in range(begin, STEPS):
        x, y = (t[rows] for t in data.next())
        rates.append(sched.get_last_lr()[0])
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
            sched.step()
        times.append(time.perf_counter() - start)
        if step == begin + 1:    # a step after the first, whose caches are warm
            counts, flops = comm.ops, comm.flops
        # the batch's mean loss: the last stage's mean over its rows, averaged over
        # the data-parallel ranks (one tensor-parallel rank of each counts)
        mine = loss.detach() / dp if last and mesh["tp"].get_local_rank() == 0 else None
        total = torch.zeros(()) if mine is None else mine.clone()
        dist.all_reduce(total)
        losses.append(total.item())
        if log:
            print(step, repr(losses[-1]), file=log, flush=True)
        done = step + 1
        die = kill_at == done and begin == 0 and \
            rank() == kill_rank % dist.get_world_size()
        if saver and done % every == 0 and done < STEPS:
            saver.save(state_of(model, opt, sched, data, layout), done, die=die)
        elif die:
            os.kill(os.getpid(), signal.SIGKILL)
    if saver:
        saver.commit()
    if log:
        log.close()
    peak = memory.get_tracker_snapshot("peak")[torch.device("cpu")] if memory else {}
    peak = {k if isinstance(k, str) else k.value: v for k, v in peak.items()}
    every_flops = [0] * dist.get_world_size()
    dist.all_gather_object(every_flops, flops)      # each rank's count of a step
    return {"layout": layout, **d, "control": control, "start": begin,
            "losses": losses, "lr": rates, "step_s": times, "collectives": counts,
            "flops": every_flops, "peak_bytes": peak,
            "state_bytes": sum(p.to_local().numel() * 4 if isinstance(p, DTensor)
                               else p.numel() * 4 for p in model.parameters()),
            "resumed": loaded, "skipped": skipped,
            "save_s": saver.seconds if saver else [], "async_save": asynchronous}


def alone() -> tuple[list[float], int]:
    """The whole model in one process, whole batches: the reference loss curve, and
    the FLOPs of one step (forward and backward) as FlopCounterMode counts them."""
    model = Model()
    opt, sched = optimizer(model.parameters())
    data, out = Batches(), []
    counter = FlopCounterMode(display=False)
    for step in range(STEPS):
        x, y = data.next()
        with counter if step == 1 else contextlib.nullcontext():
            loss = loss_fn(model(x), y)
            loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        out.append(loss.item())
    return out, counter.get_total_flops()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", nargs="*", default=None)
    ap.add_argument("--control", default=None, help="a layout to train with its "
                    "gradients averaged twice")
    ap.add_argument("--ckpt-dir", default=None, help="save each layout's state into "
                    "DIR/<layout> and start from its newest complete checkpoint there")
    ap.add_argument("--save-every", type=int, default=4)
    ap.add_argument("--async-save", action="store_true",
                    help="save with dcp.async_save")
    ap.add_argument("--resume", nargs=2, action="append", default=[],
                    metavar=("LAYOUT", "DIR"), help="train LAYOUT from the newest "
                    "complete checkpoint in DIR")
    ap.add_argument("--kill-at", type=int, default=None)
    ap.add_argument("--kill-rank", type=int, default=-1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    ref, ref_flops = alone() if rank == 0 else (None, None)   # rank 0 compares
    runs = []
    layouts = args.layouts if args.layouts is not None else \
        [] if args.resume else ["1x4x1x1"]
    jobs = [(layout, False, None) for layout in layouts]
    jobs += [(args.control, True, None)] if args.control else []
    jobs += [(layout, False, folder) for layout, folder in args.resume]
    for layout, control, resume in jobs:
        d = parse(layout)
        if math.prod(d.values()) != world:
            raise SystemExit(f"layout {layout} needs {math.prod(d.values())} ranks, "
                             f"not the {world} this launch has")
        if resume and not complete(resume):
            raise SystemExit(f"--resume {layout} {resume}: no complete checkpoint "
                             "there")
        ckpt = (f"{args.ckpt_dir}/{layout}" if args.ckpt_dir and not control
                and not resume else None)
        start = time.perf_counter()
        run = train(layout, control, ckpt, args.save_every, args.async_save, resume,
                    args.kill_at, args.kill_rank)
        run["wall_s"] = time.perf_counter() - start
        runs.append(run)
        if rank == 0:
            begin = run["start"]
            worst = max(abs(a - b) / b for a, b in zip(run["losses"], ref[begin:]))
            how = " (gradients averaged twice)" if control else ""
            if run["resumed"]:
                saved = run["resumed"]["saved_by"]
                how += (f" (resumed from step {begin} of {saved['layout']} on "
                        f"{saved['ranks']} ranks, in {run['resumed']['load_s']:.2f} s)")
            print(f"{layout}{how}:\n    " if run["resumed"] else f"{layout}{how}: ",
                  f"loss {run['losses'][0]:.4f} -> {run['losses'][-1]:.4f}, at most "
                  f"{worst:.1e} off one process", sep="")
    if rank == 0:
        print(f"one process: loss {ref[0]:.4f} -> {ref[-1]:.4f}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "reference": ref, "runs": runs,
                           "reference_flops": ref_flops,
                           "sizes": {"vocab": VOCAB, "width": WIDTH, "heads": HEADS,
                                     "blocks": BLOCKS, "seq": SEQ, "batch": BATCH,
                                     "steps": STEPS, "lr": LR, "momentum": MOMENTUM,
                                     "micro": MICRO, "opt_states": 1}}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
