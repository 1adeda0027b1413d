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

STEPS, LR = 4, 3e-3   # step 0 warms up, 1-2 are timed, 3 is watched


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
            flat = [a for arg in args
                    for a in (arg if isinstance(arg, list) else [arg])]
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
        self.watching = False
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                module.register_forward_pre_hook(lambda *_: self.look())
                module.register_full_backward_pre_hook(lambda *_: self.look())

    def held_params(self) -> int:
        params = list(self.model.parameters())
        gathered = [p for p in params if not isinstance(p, DTensor)]
        return self.shards + nbytes(gathered)

    def look(self) -> None:
        if self.watching:                  # (only in the watched step: it costs time)
            self.peak_params = max(self.peak_params, self.held_params())

    def pack(self, t: torch.Tensor):       # autograd saves `t` for the backward pass
        ptr = t.untyped_storage().data_ptr()
        params = {local(p).untyped_storage().data_ptr()   # gathered ones included
                  for p in self.model.parameters()}
        if ptr not in params:        # a weight saved by a product is not new memory
            self.saved[ptr] = t.untyped_storage().nbytes()
        return t

    def step_begins(self, watching: bool) -> None:
        self.watching = watching
        self.shards = nbytes(p for p in self.model.parameters()
                             if isinstance(p, DTensor))
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


class Run:
    """One strategy's model, optimizer and measurements on this rank."""

    def __init__(self, strategy: str, rank: int, world: int, device) -> None:
        self.strategy, self.rank, self.world = strategy, rank, world
        self.device = device
        self.model, self.inner, self.opt = wrap(strategy, world, device)
        self.watch = MemoryWatch(self.inner)
        self.times, self.losses = [], []

    def step(self, step: int) -> None:
        rows = BATCH // self.world       # this rank's slice of every batch
        x, y = (t[self.rank * rows:(self.rank + 1) * rows].to(self.device)
                for t in batch(step))
        last = step == STEPS - 1         # the step that is watched, not timed
        self.watch.step_begins(last)
        log = Collectives() if last else contextlib.nullcontext()
        saved = torch.autograd.graph.saved_tensors_hooks(self.watch.pack, lambda t: t)
        dist.barrier()
        start = time.perf_counter()
        with log, saved if last else contextlib.nullcontext():
            loss = loss_fn(self.model(x), y)
            loss.backward()
            self.grads = nbytes(p.grad for p in self.inner.parameters())
            self.opt.step()
            self.opt.zero_grad()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - start)
        if last:
            self.collectives = log.calls
        mean = loss.detach().clone()
        dist.all_reduce(mean)            # the loss of the whole batch
        self.losses.append(mean.item() / self.world)

    def result(self) -> dict:
        state = {k: v.full_tensor() if isinstance(v, DTensor) else v   # gathers shards
                 for k, v in self.inner.state_dict().items()}
        return {"strategy": self.strategy,
                "memory": {"params": self.watch.peak_params, "grads": self.grads,
                           "optimizer": nbytes(optimizer_state(self.opt)),
                           "activations": sum(self.watch.saved.values())},
                "collectives": self.collectives, "times": self.times[1:-1],
                "losses": self.losses, "state": state}


class Reference:
    """The whole model trained in this process on the whole batches (every rank at
    once: the time of its steps says how fast a rank computes while all are busy)."""

    def __init__(self, device) -> None:
        self.device, self.model = device, TinyGPT().to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=LR)
        self.times, self.losses = [], []

    def step(self, step: int) -> None:
        x, y = (t.to(self.device) for t in batch(step))
        start = time.perf_counter()
        loss = loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - start)
        self.losses.append(loss.item())


def link_sweep(device: torch.device) -> list[dict]:
    """A few timed collectives over all ranks (timed as the automatic-parallelism
    chapter's mesh2d_torch.py times them), to fit the link's latency and bandwidth."""
    from mesh2d_torch import timed
    return [{"op": op, "ranks": dist.get_world_size(), "bytes": n,
             "s": timed(op, n, None, device.type, repeats=3)}
            for op in ("all_reduce", "all_gather") for n in (2**14, 2**18, 2**22)]


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
    start = TinyGPT().to(device).state_dict()
    reference = Reference(device)
    runs = [Run(s, rank, world, device) for s in strategies]
    for step in range(STEPS):           # the strategies take turns, step by step, so
        reference.step(step)            # that a burst of load on the machine slows
        for run in runs:                # all of them, not one
            run.step(step)
    sweep = link_sweep(device)
    ref_state, ref_losses = reference.model.state_dict(), reference.losses
    results = []
    for run in runs:
        run = run.result()
        state = run.pop("state")
        run["weight_diff"] = max((state[k] - w).abs().max().item()
                                 for k, w in ref_state.items())
        run["moved"] = max((state[k] - w).abs().max().item()
                           for k, w in start.items())
        run["loss_diff"] = max(abs(a - b) for a, b in zip(run["losses"], ref_losses))
        everyone = [None] * world
        dist.all_gather_object(everyone, run["memory"])    # every rank's memory
        run["memory_per_rank"] = everyone
        results.append(run)
    runs = results
    if rank == 0:
        print(f"TinyGPT, {sum(w.numel() for w in ref_state.values())} parameters, "
              f"{STEPS} Adam steps on {world} ranks ({device.type})")
        print(f"{'':8}{'MiB per rank: params':>22}{'grads':>8}{'Adam':>8}{'activ.':>8}"
              f"   (then the collectives of a step)")
        for run in runs:
            m = run["memory"]
            ops = Counter(op for op, _, _ in run["collectives"])
            print(f"{run['strategy']:<8}{m['params'] / 2**20:22.3f}"
                  f"{m['grads'] / 2**20:8.3f}{m['optimizer'] / 2**20:8.3f}"
                  f"{m['activations'] / 2**20:8.3f}\n{'':10}"
                  + ", ".join(f"{n} {op}" for op, n in sorted(ops.items())))
        print("largest difference from one process:\n  "
              + ", ".join(f"{r['strategy']} {r['weight_diff']:.1e}" for r in runs))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "device": device.type, "runs": runs,
                           "ref_losses": ref_losses, "ref_times": reference.times[1:-1],
                           "sweep": sweep}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
