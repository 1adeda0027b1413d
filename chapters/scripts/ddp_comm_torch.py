"""What DistributedDataParallel communicates, counted with a communication hook.

    torchrun --standalone --nproc_per_node 2 ddp_comm_torch.py

Uses the data, model and training loop of ddp_torch.py. Rank 0 writes what it counted
to --out (runs/comm_torch.json) as JSON.
"""
import argparse
import inspect
import json
import os
import re

os.environ.setdefault("KINETO_LOG_LEVEL", "6")    # the profiler's notices stay quiet
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.futures import Future
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import profile
from torch.utils.data import DataLoader, DistributedSampler

from ddp_torch import make_data, make_model, setup, train_epoch


class Counter:
    """Counts what DDP all-reduces. `hook` is the communication hook: it notes each
    bucket, then all-reduces it as DDP does by default (sum, divided by the world)."""

    def __init__(self, model: nn.Module) -> None:
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.calls, self.bytes, self.buckets = 0, 0, []

    def hook(self, state, bucket: dist.GradBucket) -> Future[torch.Tensor]:
        grads = bucket.buffer()                  # the bucket's gradients, flattened
        self.calls += 1
        self.bytes += grads.numel() * grads.element_size()
        names = [self.names[id(p)] for p in bucket.parameters()]
        self.buckets.append({"index": bucket.index(), "params": names,
                             "dtype": str(grads.dtype).replace("torch.", "")})
        return default_hooks.allreduce_hook(state, bucket)


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def accumulation(world: int, rank: int, device: torch.device, accum: int,
                 use_no_sync: bool, compress: bool = False,
                 ) -> tuple[dict, torch.Tensor]:
    """One epoch at a global batch of 32 rows in `accum` micro-batches per step."""
    net = make_model().to(device)
    model = DDP(net)
    count = Counter(net)
    if compress:    # bf16 needs NCCL (or XCCL); gloo all-reduces fp16
        wrap = (default_hooks.bf16_compress_wrapper if device.type == "cuda"
                else default_hooks.fp16_compress_wrapper)
        model.register_comm_hook(None, wrap(count.hook))
    else:
        model.register_comm_hook(None, count.hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    data = make_data()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank)
    loader = DataLoader(data, batch_size=32 // (world * accum), sampler=sampler)
    if use_no_sync:
        train_epoch(model, loader, opt, device, accum)
    else:           # accumulate without no_sync: every backward all-reduces
        for i, (x, y) in enumerate(loader):
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            (loss / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
    run = {"accum": accum, "no_sync": use_no_sync, "compress": compress,
           "steps": len(loader) // accum, "backwards": len(loader),
           "allreduces": count.calls, "bytes": count.bytes,
           "dtype": count.buckets[0]["dtype"]}
    return run, flat(net)


def buckets(device: torch.device, cap_mb: float | None) -> dict:
    """Which parameters DDP puts in which bucket, in the first step and after."""
    net = make_model(256, 1024, 256).to(device)        # two 1 MiB weight matrices
    model = DDP(net) if cap_mb is None else DDP(net, bucket_cap_mb=cap_mb)
    count = Counter(net)
    model.register_comm_hook(None, count.hook)
    x = torch.randn(8, 256, device=device)
    steps = []
    for _ in range(2):      # DDP rebuilds its buckets after the first backward
        count.buckets = []
        model(x).sum().backward()
        steps.append([b["params"] for b in count.buckets])
    sizes = {name: p.numel() * p.element_size() for name, p in net.named_parameters()}
    return {"bucket_cap_mb": cap_mb, "first_step": steps[0], "later": steps[1],
            "sizes": sizes}


def broadcasts(device: torch.device, sync_buffers: bool) -> dict:
    """Broadcasts DDP runs in four forward passes, counted with the profiler."""
    net = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU(),
                        nn.Linear(64, 4)).to(device)      # BatchNorm holds 3 buffers
    # broadcast_buffers is called forward_sync_buffers in PyTorch 2.13.
    name = ("forward_sync_buffers" if "forward_sync_buffers" in
            inspect.signature(DDP).parameters else "broadcast_buffers")
    model = DDP(net, **{name: sync_buffers})
    x = torch.randn(16, 32, device=device)
    for _ in range(2):     # the second forward also broadcasts rank 0's bucket order
        model(x).sum().backward()
    with profile() as prof:
        for _ in range(4):
            model(x).sum().backward()
    calls = sum(e.count for e in prof.key_averages() if e.key == "c10d::broadcast_")
    return {"option": name, "value": sync_buffers, "forwards": 4, "broadcasts": calls}


class TwoHeads(nn.Module):
    """Two heads on one body; each step uses one of them (two alternating tasks)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(32, 64)
        self.heads = nn.ModuleList([nn.Linear(64, 4) for _ in range(2)])

    def forward(self, x: torch.Tensor, task: int) -> torch.Tensor:
        return self.heads[task](torch.relu(self.body(x)))


def unused_parameters(device: torch.device, find_unused: bool) -> dict:
    model = DDP(TwoHeads().to(device), find_unused_parameters=find_unused)
    x = torch.randn(16, 32, device=device)
    try:
        for step in range(2):
            model(x, task=step % 2).sum().backward()
    except RuntimeError as err:
        # the message's first paragraph, whole sentences (its first line ended "and by")
        said = " ".join(str(err).split("\n\n")[0].split())
        return {"find_unused_parameters": find_unused,
                "error": " ".join(re.split(r"(?<=\.) ", said)[:3])}
    return {"find_unused_parameters": find_unused, "error": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/comm_torch.json")
    args = ap.parse_args()
    rank, world, device = setup()
    runs = [accumulation(world, rank, device, 1, True),
            accumulation(world, rank, device, 4, False),
            accumulation(world, rank, device, 4, True),
            accumulation(world, rank, device, 1, True, compress=True)]
    first = runs[0][1]
    report = {
        "world": world, "device": str(device), "backend": dist.get_backend(),
        "accumulation": [{**run, "max_diff": (w - first).abs().max().item()}
                         for run, w in runs],
        "buckets": [buckets(device, cap) for cap in (None, 0.5, 4)],
        "broadcasts": [broadcasts(device, sync) for sync in (True, False)],
        "unused": [unused_parameters(device, f) for f in (True, False)],
    }
    if rank == 0:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
