"""Tensor and sequence parallelism for the sharding chapter's TinyGPT, on ranks.

    torchrun --standalone --nproc_per_node 2 tp_torch.py --out tp.json     # CPU, gloo
    torchrun --standalone --nproc_per_node 4 tp_torch.py --tp 2,4 --dp 2   # + 2 x 2
    torchrun --standalone --nproc_per_node 2 tp_torch.py --device cuda     # GPUs, NCCL

Each way of splitting trains STEPS steps beside the one-process model, from the same
weights on the same batches, and must agree with it:

  by hand  Megatron's two operators (Shoeybi et al. 2019) as autograd functions: f is
           the identity forward and an all-reduce of the gradient backward, g the
           reverse. Column-parallel linear (f, then this rank's rows of the weight) then
           row-parallel linear (this rank's columns, then g): the attention's q/k/v
           product and its projection (a rank holds HEADS/tp heads), the MLP's two
           linears. Embedding, norms and head stay whole on every rank.
  TP       the same split with DTensor: parallelize_module with ColwiseParallel and
           RowwiseParallel, the embedding and head split along the vocabulary, the loss
           computed on the split logits (loss_parallel).
  TP+SP    plus SequenceParallel: the norms and residuals hold s/tp tokens; each
           all-reduce becomes a reduce-scatter and an all-gather (Korthikanti et al.
           2022).

With --dp > 1 the TP+SP model is also trained on a 2-D mesh, dp x tp: the batch split
along "dp" and the parameters sharded along it by FSDP2's fully_shard.
"""
import argparse
from contextlib import ExitStack, nullcontext
import json
import logging
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               SequenceParallel, loss_parallel,
                                               parallelize_module)
from torch.utils._python_dispatch import TorchDispatchMode

from tinygpt_torch import BATCH, HEADS, WIDTH, TinyGPT, batch, loss_fn

# CommDebugMode's module tracker warns when a module's input needs no gradient; gloo's
# old collective names are deprecated (they still run)
warnings.filterwarnings("ignore", message="Full backward hook")
warnings.filterwarnings("ignore", message=".*deprecated")
# fully_shard warns that a block returns a view (in-place ops on it would skip a hook)
warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
# DTensor logs that gathering a 2-D sharded gradient takes two all-gathers (it does)
logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
STEPS, LR = 3, 3e-3
GROUP = None       # the tensor-parallel process group of the by-hand model


# --- Megatron's conjugate operators ---------------------------------------------------
class Copy(torch.autograd.Function):
    """f: the identity forward; backward, each rank's gradient is only the part its
    columns of the next weight caused: all-reduce to add them up."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=GROUP)
        return grad


class Reduce(torch.autograd.Function):
    """g: forward, each rank holds a partial sum of the output: all-reduce it; backward,
    the gradient of a sum reaches every summand whole: the identity."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=GROUP)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ColumnParallel(nn.Module):
    """This rank's output features of `full`: f, then (b, s, in) @ (in, out/tp)."""

    def __init__(self, full: nn.Linear, rows: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(full.weight.detach()[rows].clone())
        self.bias = None if full.bias is None else \
            nn.Parameter(full.bias.detach()[rows].clone())

    def forward(self, x):
        return F.linear(Copy.apply(x), self.weight, self.bias)


class RowParallel(nn.Module):
    """This rank's input features of `full`: (b, s, in/tp) @ (in/tp, out), then g; the
    bias is added once, after the sum."""

    def __init__(self, full: nn.Linear, cols: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(full.weight.detach()[:, cols].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())

    def forward(self, x):
        return Reduce.apply(F.linear(x, self.weight)) + self.bias


def head_rows(rank: int, tp: int) -> torch.Tensor:
    """Rows of the fused q/k/v weight (3*WIDTH, WIDTH) for this rank's HEADS/tp heads:
    its queries, its keys, its values."""
    part = WIDTH // tp
    return torch.cat([c * WIDTH + rank * part + torch.arange(part) for c in range(3)])


def mine_of(rank: int, part: int) -> torch.Tensor:
    """Rank `rank`'s `part` features: the rank-th block of them."""
    return torch.arange(rank * part, (rank + 1) * part)


def by_hand(model: TinyGPT, rank: int, tp: int) -> TinyGPT:
    part, hidden = WIDTH // tp, 4 * WIDTH // tp
    for block in model.blocks.values():
        block.qkv = ColumnParallel(block.qkv, head_rows(rank, tp))     # heads' q, k, v
        block.proj = RowParallel(block.proj, mine_of(rank, part))      # heads' outputs
        block.mlp[0] = ColumnParallel(block.mlp[0], mine_of(rank, hidden))
        block.mlp[2] = RowParallel(block.mlp[2], mine_of(rank, hidden))
    return model


# --- the same with PyTorch's API ------------------------------------------------------
def with_api(model: TinyGPT, mesh, tp: int, sp: bool) -> TinyGPT:
    """ColwiseParallel splits a weight's rows in tp equal chunks, in order. The fused
    q/k/v weight holds all queries, then all keys, then all values: regroup its rows
    first, so that chunk r is rank r's heads (the one-process model reads them back)."""
    order = torch.cat([head_rows(r, tp) for r in range(tp)])
    for block in model.blocks.values():
        block.qkv.weight = nn.Parameter(block.qkv.weight.detach()[order].clone())
    seq = Shard(1) if sp else Replicate()     # the layout between the blocks
    block_plan = {"qkv": ColwiseParallel(input_layouts=seq),
                  "proj": RowwiseParallel(output_layouts=seq),
                  "mlp.0": ColwiseParallel(input_layouts=seq),
                  "mlp.2": RowwiseParallel(output_layouts=seq)}
    if sp:
        block_plan |= {"norm1": SequenceParallel(), "norm2": SequenceParallel()}
    for block in model.blocks.values():
        parallelize_module(block, mesh, block_plan)
    top = {"embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
           # logits split along the vocabulary, for loss_parallel
           "head": ColwiseParallel(input_layouts=seq, use_local_output=False)}
    if sp:
        top["norm"] = SequenceParallel()
    return parallelize_module(model, mesh, top)


# --- what a step moves and keeps --------------------------------------------------
def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


# the collectives' names, by hand (c10d) and through DTensor (functional collectives)
# (and FSDP's, along "dp")
KINDS = {"allreduce": "all_reduce", "all_reduce": "all_reduce",
         "all_gather_into_tensor": "all_gather",
         "reduce_scatter_tensor": "reduce_scatter",
         "allgather_base": "all_gather", "reduce_scatter_base": "reduce_scatter"}


class Collectives(TorchDispatchMode):
    """Every collective this rank starts: its name, the bytes of the whole tensor it
    works on (the largest of its tensors) and its group's size."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__.strip("_")
        if func.namespace in ("c10d", "_c10d_functional") and name in KINDS:
            flat = [a for arg in args
                    for a in (arg if isinstance(arg, list) else [arg])]
            size = max(t.numel() * t.element_size() for t in flat
                       if isinstance(t, torch.Tensor))
            if func.namespace == "_c10d_functional":   # (tensor, [group size,] name)
                ranks = args[1] if name == "all_gather_into_tensor" else \
                    dist.distributed_c10d._resolve_process_group(args[-1]).size()
            else:                                      # a ProcessGroup among the args
                ranks = next(dist.ProcessGroup.unbox(a).size() for a in flat
                             if isinstance(a, torch.ScriptObject)
                             and "ProcessGroup" in str(a._type()))
            if name == "all_gather_into_tensor":       # its argument is one shard
                size *= ranks
            self.calls.append([KINDS[name], size, ranks])
        return func(*args, **(kwargs or {}))


class Saved:
    """The bytes autograd saves for the backward pass (each storage once, weights left
    out: a product saves its weight, which is no new memory)."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.bytes = model, {}
        self.shards = {}     # a DTensor parameter's local storage: looked up once

    def storage_of(self, p) -> int:
        if not isinstance(p, DTensor):
            return p.untyped_storage().data_ptr()
        if id(p) not in self.shards:    # (p kept, so that its id is not reused)
            self.shards[id(p)] = p, p.to_local().untyped_storage().data_ptr()
        return self.shards[id(p)][1]

    def pack(self, t):
        mine = local(t)
        if isinstance(mine, AsyncCollectiveTensor):   # a collective's output, in flight
            mine = mine.trigger_wait()
        storage = mine.untyped_storage()
        # the parameters as they are now (FSDP swaps gathered ones in and out)
        weights = {self.storage_of(p) for p in self.model.parameters()}
        if storage.data_ptr() not in weights:
            self.bytes[storage.data_ptr()] = storage.nbytes()
        return t


def step(model, opt, tokens, targets, parallel_loss: bool, watch: bool):
    """One training step; when watched, its collectives (forward, backward and
    optimizer apart), the activations it saved, and its logits and gradients."""
    logged = {"forward": Collectives(), "backward": Collectives(),
              "optimizer": Collectives()}
    counts = {"forward": CommDebugMode(), "backward": CommDebugMode()}
    saved = Saved(model)
    hooks = torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t)
    vocab = loss_parallel() if parallel_loss else nullcontext()
    with ExitStack() as watching:
        if watch:
            for c in (logged["forward"], counts["forward"], hooks):
                watching.enter_context(c)
        logits = model(tokens)
        with vocab:
            loss = loss_fn(logits, targets)
    with ExitStack() as watching:
        if watch:
            for c in (logged["backward"], counts["backward"]):
                watching.enter_context(c)
        with loss_parallel() if parallel_loss else nullcontext():
            loss.backward()
        for p in model.parameters():
            # SequenceParallel's norms see s/tp tokens: their gradients are partial
            # sums over the ranks' tokens; the optimizer needs them summed
            if isinstance(p.grad, DTensor) and \
                    any(q.is_partial() for q in p.grad.placements):
                p.grad = p.grad.redistribute(placements=[
                    Replicate() if q.is_partial() else q for q in p.grad.placements])
    out = {}
    if watch:
        whole = logits.full_tensor() if isinstance(logits, DTensor) else logits
        out = {"logits": whole.detach().clone(),
               "grads": {n: p.grad.detach().clone()
                         for n, p in model.named_parameters()},
               "activations": sum(saved.bytes.values())}
    with logged["optimizer"] if watch else nullcontext():
        opt.step()
    if watch:
        out["collectives"] = {k: v.calls for k, v in logged.items()}
        out["comm_debug"] = {k: {str(op).split(".")[-1]: n
                                 for op, n in v.get_comm_counts().items()}
                             for k, v in counts.items()}
    opt.zero_grad()
    return out


def shard_of(ref: torch.Tensor, mine, name: str, how: str, rank: int, tp: int):
    """The part of the one-process tensor `ref` that this rank's `mine` should equal."""
    if isinstance(mine, DTensor):      # the API's parameters: compare the whole tensor
        whole = mine.full_tensor()
        if name.endswith("qkv.weight"):
            order = torch.cat([head_rows(r, tp) for r in range(tp)])
            whole = whole[torch.argsort(order)]
        return ref, whole
    if how == "by hand" and name.endswith("qkv.weight"):
        return ref[head_rows(rank, tp)], mine
    if how == "by hand" and tuple(mine.shape) != tuple(ref.shape):
        # column-parallel: rows; row-parallel: columns (the bias stays whole)
        dim = 0 if mine.dim() == 1 or mine.shape[-1] == ref.shape[-1] else 1
        n = mine.shape[dim]
        return ref.narrow(dim, rank * n, n), mine
    return ref, mine


class Reference:
    """The one-process model trained on whole batches, once per rank (every rank at the
    same time): what each split run must equal."""

    def __init__(self, device) -> None:
        self.model = TinyGPT().to(device)
        start = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        opt = torch.optim.Adam(self.model.parameters(), lr=LR, foreach=False)
        self.times = []
        for k in range(STEPS):
            tokens, targets = (t.to(device) for t in batch(k))
            t0 = time.perf_counter()
            out = step(self.model, opt, tokens, targets, False, k == 0)
            if k == 0:
                self.first = out
            else:
                self.times.append(time.perf_counter() - t0)
        self.params = {n: p.detach() for n, p in self.model.named_parameters()}
        self.moved = max((p - start[n]).abs().max().item()
                         for n, p in self.params.items())


def train(how: str, world_mesh, device, dp: int, ref: Reference) -> dict:
    """`how` on the mesh's "tp" groups; the batch split over its "dp" groups if dp > 1
    (each tp group trains the whole batch otherwise)."""
    global GROUP
    GROUP = world_mesh["tp"].get_group()
    rank_tp = world_mesh["tp"].get_local_rank()
    tp = world_mesh["tp"].size()
    dp_rank = world_mesh["dp"].get_local_rank() if dp > 1 else 0
    model = TinyGPT().to(device)
    if how == "by hand":
        model = by_hand(model, rank_tp, tp)
    else:
        model = with_api(model, world_mesh["tp"], tp, sp=how != "TP")
        if dp > 1:
            for block in model.blocks.values():
                fully_shard(block, mesh=world_mesh["dp"])
            fully_shard(model, mesh=world_mesh["dp"])
    opt = torch.optim.Adam(model.parameters(), lr=LR, foreach=False)
    rows = BATCH // dp
    mine = slice(dp_rank * rows, (dp_rank + 1) * rows)     # this replica's rows
    first, times = None, []
    for k in range(STEPS):       # step 0 is watched; the others are timed
        tokens, targets = (t.to(device) for t in batch(k))
        dist.barrier()
        t0 = time.perf_counter()
        out = step(model, opt, tokens[mine], targets[mine], how != "by hand", k == 0)
        dist.barrier()
        if k == 0:
            first = out
        else:
            times.append(time.perf_counter() - t0)
    params = dict(model.named_parameters())
    diffs = {"logits": (first["logits"] - ref.first["logits"][mine]).abs().max().item()}
    for what, ours, theirs in (("grads", first["grads"], ref.first["grads"]),
                               ("weights", params, ref.params)):
        worst = 0.0
        for name, p in params.items():
            r, m = shard_of(theirs[name].detach(),
                            ours[name] if what == "grads" else p.detach(), name, how,
                            rank_tp, tp)
            worst = max(worst, (r - local(m)).abs().max().item())
        diffs[what] = worst
    worst = torch.tensor([diffs["logits"], diffs["grads"], diffs["weights"]],
                         device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return {"how": how, "tp": tp, "dp": dp, "logits_diff": worst[0].item(),
            "grad_diff": worst[1].item(), "weight_diff": worst[2].item(),
            "moved": ref.moved, "collectives": first["collectives"],
            "comm_debug": first["comm_debug"], "activations": first["activations"],
            "step_s": times, "ref_step_s": ref.times,
            "ref_activations": ref.first["activations"],
            "params": sum(local(p).numel() * local(p).element_size()
                          for p in model.parameters()),
            "ref_params": sum(p.numel() * p.element_size()
                              for p in ref.params.values())}


def sweep(device, repeats: int = 5) -> list[dict]:
    """Bare all-reduces and all-gathers over all ranks, two sizes, for the planner's
    link: the fastest of `repeats` on each rank, then the slowest rank's."""
    world, rows = dist.get_world_size(), []
    for op in ("all_reduce", "all_gather"):
        for nbytes in (2**14, 2**17):        # 16 KiB, and 128 KiB (the blocks' size)
            x = torch.ones(nbytes // 4 // (world if op == "all_gather" else 1),
                           device=device)
            out = torch.empty(nbytes // 4, device=device)
            run = (lambda: dist.all_reduce(x)) if op == "all_reduce" else \
                (lambda: dist.all_gather_into_tensor(out, x))
            run()
            best = float("inf")
            for _ in range(repeats):
                dist.barrier()
                t0 = time.perf_counter()
                run()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t0)
            slowest = torch.tensor([best], device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            rows.append({"op": op, "ranks": world, "bytes": nbytes,
                         "s": slowest.item()})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tp", help="tensor-parallel degrees to run, e.g. 2,4 "
                    "(default: all ranks in one group)")
    ap.add_argument("--dp", type=int, default=1, help="then a dp x (world/dp) mesh")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    device = torch.device(args.device, rank % max(1, torch.cuda.device_count())) \
        if args.device == "cuda" else torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(device)
    ref, runs = Reference(device), []
    for tp in [int(t) for t in args.tp.split(",")] if args.tp else [world]:
        assert HEADS % tp == 0 and world % tp == 0, f"{tp} does not split the heads"
        # world/tp groups of tp ranks, each training the whole batch
        mesh = init_device_mesh(args.device, (world // tp, tp),
                                mesh_dim_names=("dp", "tp"))
        runs += [train(how, mesh, device, 1, ref) for how in ("by hand", "TP", "TP+SP")]
    if args.dp > 1:
        mesh = init_device_mesh(args.device, (args.dp, world // args.dp),
                                mesh_dim_names=("dp", "tp"))
        runs.append(train("DP x TP+SP", mesh, device, args.dp, ref))
    links = sweep(device)
    if rank == 0:
        print(f"TinyGPT on {world} ranks ({args.device}), {STEPS} Adam steps, "
              "each beside the one-process model:")
        for r in runs:
            ops = {p: [f"{op} of {size / 1024:g} KiB over {n}" for op, size, n in calls]
                   for p, calls in r["collectives"].items()}
            print(f"  {r['how']:<11} dp {r['dp']} x tp {r['tp']}: logits "
                  f"{r['logits_diff']:.0e}, grads {r['grad_diff']:.0e}, weights "
                  f"{r['weight_diff']:.0e} from one process\n    (training moved them "
                  f"{r['moved']:.0e}); per rank {r['params'] / 2**10:.0f} KiB "
                  f"parameters, {r['activations'] / 2**10:.0f} KiB activations\n    "
                  f"(one process: {r['ref_params'] / 2**10:.0f}, "
                  f"{r['ref_activations'] / 2**10:.0f}); "
                  f"{min(r['step_s']) * 1e3:.0f} ms/step (one process: "
                  f"{min(r['ref_step_s']) * 1e3:.0f})")
            for phase, names in ops.items():
                print(f"    {phase:<8} {len(names)} collectives:")
                for n in sorted(set(names)):
                    print(f"      {n} x{names.count(n)}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "runs": runs, "sweep": links}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
