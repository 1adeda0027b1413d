"""ZeRO's stages with PyTorch's own tools: what each rank holds, what it sends, and the
weights it ends with, against training the whole model in one process.

    torchrun --nproc_per_node 2 zero_torch.py --out zero2.json      # CPU ranks, gloo
    torchrun --nproc_per_node 4 zero_torch.py --out zero4.json      # adds the 2-D mesh
    torchrun --nproc_per_node gpu zero_torch.py --device cuda       # one rank per GPU

Each strategy trains the same model from the same weights on the same batches, one
after the other (each rank takes its slice of every batch):

  DP      DistributedDataParallel and Adam: every rank holds everything
  ZeRO-1  DDP and ZeroRedundancyOptimizer: Adam's state split over the ranks
  ZeRO-2  fully_shard(reshard_after_forward=False): gradients and Adam's state split;
          each block's parameters gathered once per step, kept until its backward
  ZeRO-3  fully_shard(reshard_after_forward=True): parameters split too; each block's
          gathered for its forward, freed, gathered again for its backward
  2-D     fully_shard on a (replicate, shard) mesh: ZeRO-3 inside pairs of ranks, data
          parallel across the pairs (4 ranks or more)
"""
import argparse
import contextlib
import json
import os
import time
import warnings
from collections import Counter

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode

from tinygpt_torch import BATCH, TinyGPT, batch, loss_fn

# a full backward hook on the embedding, whose input (token ids) needs no gradient
warnings.filterwarnings("ignore", message="Full backward hook")
# fully_shard warns that a block returns a view (in-place ops on it would skip a hook)
warnings.filterwarnings("ignore", message="FSDP2-wrapped module")

STEPS, LR = 5, 3e-3   # step 0 warms up, 1-3 are timed, 4 is watched


def local(t: torch.Tensor) -> torch.Tensor:
    """The part of `t` this rank stores: its shard if `t` is a DTensor."""
    return t.to_local() if isinstance(t, DTensor) else t


def nbytes(tensors) -> int:
    return sum(local(t).numel() * local(t).element_size() for t in tensors)


class Collectives(TorchDispatchMode):
    """Every collective this rank starts, with the size of the whole tensor it works on
    (the largest of its tensors) and the number of ranks in its group."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d" and "barrier" not in func.__name__:
            flat = [a for arg in args for a in (arg if isinstance(arg, list) else [arg])]
            tensors = [t for t in flat if isinstance(t, torch.Tensor)]
            group = next(dist.ProcessGroup.unbox(a) for a in flat  # (a C++ object)
                         if isinstance(a, torch.ScriptObject)
                         and "ProcessGroup" in str(a._type()))
            self.calls.append((func._overloadpacket.__name__.strip("_"),
                               max(t.numel() * t.element_size() for t in tensors),
                               group.size()))
        return func(*args, **(kwargs or {}))


class MemoryWatch:
    """What a rank holds during a step. Parameters: the shards it stores, plus the whole
    parameters of the blocks that are gathered (fully_shard swaps a block's DTensor
    shards for plain tensors while the block is gathered), read as the step runs.
    Activations: the tensors autograd saves for the backward pass."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.peak_params, self.saved = model, 0, {}
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                module.register_forward_pre_hook(lambda *_: self.look())
                module.register_full_backward_pre_hook(lambda *_: self.look())

    def held_params(self) -> int:
        params = list(self.model.parameters())
        gathered = [p for p in params if not isinstance(p, DTensor)]
        return self.shards + nbytes(gathered)

    def look(self) -> None:
        self.peak_params = max(self.peak_params, self.held_params())

    def pack(self, t: torch.Tensor):       # autograd saves `t` for the backward pass
        ptr = t.untyped_storage().data_ptr()
        params = {local(p).untyped_storage().data_ptr() for p in self.model.parameters()}
        if ptr not in params:              # a weight saved by a product is not new memory
            self.saved[ptr] = t.untyped_storage().nbytes()
        return t

    def step_begins(self) -> None:
        self.shards = nbytes(p for p in self.model.parameters() if isinstance(p, DTensor))
        self.peak_params, self.saved = self.held_params(), {}


def wrap(strategy: str, world: int, device: torch.device):
    """The model and optimizer of one strategy, on this rank."""
    model = TinyGPT().to(device)
    if strategy in ("DP", "ZeRO-1"):
        # gradient_as_bucket_view: the gradients live in DDP's buckets, no second copy
        ddp = DDP(model, gradient_as_bucket_view=True,
                  device_ids=[device.index] if device.type == "cuda" else None)
        if strategy == "DP":
            return ddp, model, torch.optim.Adam(model.parameters(), lr=LR)
        return ddp, model, ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.Adam, lr=LR,
            parameters_as_bucket_view=True)
    if strategy == "2-D":
        mesh = init_device_mesh(device.type, (world // 2, 2),
                                mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device.type, (world,))
    keep = strategy == "ZeRO-2"          # keep the gathered parameters until backward
    for part in [model.embed, *model.blocks.values(), model.head]:
        fully_shard(part, mesh=mesh, reshard_after_forward=not keep)   # one unit each
    fully_shard(model, mesh=mesh, reshard_after_forward=not keep)      # the rest: norm
    return model, model, torch.optim.Adam(model.parameters(), lr=LR)


def optimizer_state(opt) -> list[torch.Tensor]:
    if isinstance(opt, ZeroRedundancyOptimizer):
        opt = opt.optim                  # the Adam that updates this rank's partition
    return [t for state in opt.state.values() for t in state.values()
            if isinstance(t, torch.Tensor)]


def train(strategy: str, rank: int, world: int, device: torch.device) -> dict:
    model, inner, opt = wrap(strategy, world, device)
    watch = MemoryWatch(inner)
    replicas = world // 2 if strategy == "2-D" else world
    rows = BATCH // world                # this rank's slice of every batch
    times, losses = [], []
    for step in range(STEPS):
        x, y = (t[rank * rows:(rank + 1) * rows].to(device) for t in batch(step))
        last = step == STEPS - 1        # the step that is watched, not timed
        watch.step_begins()
        log = Collectives() if last else contextlib.nullcontext()
        saved = torch.autograd.graph.saved_tensors_hooks(watch.pack, lambda t: t)
        dist.barrier()
        start = time.perf_counter()
        with log, saved if last else contextlib.nullcontext():
            loss = loss_fn(model(x), y)
            loss.backward()
            grads = nbytes(p.grad for p in inner.parameters())
            opt.step()
            opt.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        mean = loss.detach().clone()
        dist.all_reduce(mean)            # the loss of the whole batch
        losses.append(mean.item() / world)
    state = {k: v.full_tensor() if isinstance(v, DTensor) else v
             for k, v in inner.state_dict().items()}       # all-gathers the shards
    return {"strategy": strategy, "replicas": replicas,
            "memory": {"params": watch.peak_params, "grads": grads,
                       "optimizer": nbytes(optimizer_state(opt)),
                       "activations": sum(watch.saved.values())},
            "stored_params": watch.shards or nbytes(inner.parameters()),
            "collectives": log.calls, "times": times[1:-1], "losses": losses,
            "state": state}


def reference(device: torch.device) -> tuple[dict, list]:
    """The whole model trained in this process on the whole batches."""
    model = TinyGPT().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        x, y = (t.to(device) for t in batch(step))
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return model.state_dict(), losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--strategies", default="DP,ZeRO-1,ZeRO-2,ZeRO-3,2-D")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if BATCH % world:
        raise SystemExit(f"{BATCH} sequences per step do not split over {world} ranks")
    strategies = [s for s in args.strategies.split(",")
                  if s != "2-D" or (world >= 4 and world % 2 == 0)]
    ref_state, ref_losses = reference(device)
    start = TinyGPT().to(device).state_dict()
    runs = []
    for strategy in strategies:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        run = train(strategy, rank, world, device)
        if device.type == "cuda":
            run["cuda_peak"] = torch.cuda.max_memory_allocated(device)
        state = run.pop("state")
        run["weight_diff"] = max((state[k] - w).abs().max().item()
                                 for k, w in ref_state.items())
        run["moved"] = max((state[k] - w).abs().max().item()
                           for k, w in start.items())
        run["loss_diff"] = max(abs(a - b) for a, b in zip(run["losses"], ref_losses))
        everyone = [None] * world
        dist.all_gather_object(everyone, run["memory"])    # every rank's memory
        run["memory_per_rank"] = everyone
        runs.append(run)
    if rank == 0:
        print(f"TinyGPT, {sum(w.numel() for w in ref_state.values())} parameters, "
              f"{STEPS} Adam steps on {world} ranks ({device.type})")
        print(f"{'':8}{'MiB per rank: params':>22}{'grads':>8}{'Adam':>8}{'activ.':>8}"
              f"   collectives per step")
        for run in runs:
            m = run["memory"]
            ops = Counter(op for op, _, _ in run["collectives"])
            print(f"{run['strategy']:<8}{m['params'] / 2**20:22.3f}"
                  f"{m['grads'] / 2**20:8.3f}{m['optimizer'] / 2**20:8.3f}"
                  f"{m['activations'] / 2**20:8.3f}   "
                  + ", ".join(f"{n} {op}" for op, n in sorted(ops.items())))
        print("largest difference from one process: "
              + ", ".join(f"{r['strategy']} {r['weight_diff']:.1e}" for r in runs))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "device": device.type, "runs": runs,
                           "ref_losses": ref_losses}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
