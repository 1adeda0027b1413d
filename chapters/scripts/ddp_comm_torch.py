"""What DistributedDataParallel communicates, counted with a communication hook.

    torchrun --standalone --nproc_per_node 2 ddp_comm_torch.py --out runs/comm_torch.json

Uses the data, model and training loop of ddp_torch.py. Rank 0 prints what it counted
and writes it to --out as JSON.
"""
import argparse
import inspect
import json

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import profile
from torch.utils.data import DataLoader, DistributedSampler

from ddp_torch import make_data, make_model, setup, train_epoch


class Counter:
    """Counts what DDP all-reduces. `hook` is the communication hook: it notes each
    bucket, then all-reduces it as DDP would (sum, divided by the world size)."""

    def __init__(self, model: nn.Module) -> None:
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.calls, self.bytes, self.buckets = 0, 0, []

    def hook(self, state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer()             # the bucket's gradients, flattened
        self.calls += 1
        self.bytes += buffer.numel() * buffer.element_size()
        self.buckets.append({"index": bucket.index(), "dtype": str(buffer.dtype),
                             "params": [self.names[id(p)] for p in bucket.parameters()]})
        return default_hooks.allreduce_hook(state, bucket)


def loader(world: int, rank: int, rows: int) -> DataLoader:
    sampler = DistributedSampler(make_data(), num_replicas=world, rank=rank)
    return DataLoader(make_data(), batch_size=rows, sampler=sampler, drop_last=True)


def weights(model: nn.Module) -> list:
    return [p.detach().flatten().tolist() for p in model.parameters()]


def accumulation(world: int, rank: int, device: torch.device, accum: int,
                 use_no_sync: bool, compress: bool = False) -> dict:
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
    data = loader(world, rank, 32 // (world * accum))
    if use_no_sync:
        train_epoch(model, data, opt, device, accum)
    else:           # accumulate without no_sync: every backward all-reduces
        for i, (x, y) in enumerate(data):
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            (loss / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
    return {"accum": accum, "no_sync": use_no_sync, "compress": compress,
            "steps": len(data) // accum, "backwards": len(data),
            "allreduces": count.calls, "bytes": count.bytes,
            "dtype": count.buckets[0]["dtype"], "weights": weights(net)}


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
        steps.append(count.buckets)
    sizes = {name: p.numel() * p.element_size() for name, p in net.named_parameters()}
    return {"cap_mb": cap_mb, "first_step": steps[0], "later": steps[1], "sizes": sizes}


def broadcasts(device: torch.device, sync_buffers: bool) -> dict:
    """Broadcasts DDP runs in forward passes, counted with the profiler."""
    net = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU(),
                        nn.Linear(64, 4)).to(device)      # BatchNorm holds 3 buffers
    # PyTorch 2.13 renamed broadcast_buffers to forward_sync_buffers.
    name = ("forward_sync_buffers" if "forward_sync_buffers" in
            inspect.signature(DDP).parameters else "broadcast_buffers")
    model = DDP(net, **{name: sync_buffers})
    x = torch.randn(16, 32, device=device)
    model(x).sum().backward()   # the first step also broadcasts the new bucket order
    with profile() as prof:
        for _ in range(4):
            model(x).sum().backward()
    calls = sum(e.count for e in prof.key_averages() if e.key == "c10d::broadcast_")
    return {name: sync_buffers, "forwards": 4, "broadcasts": calls}


class TwoHeads(nn.Module):
    """A model with a head the loss never uses."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head, self.unused = nn.Linear(32, 64), nn.Linear(64, 4), nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


def unused_parameters(device: torch.device, find_unused: bool) -> dict:
    model = DDP(TwoHeads().to(device), find_unused_parameters=find_unused)
    x = torch.randn(16, 32, device=device)
    try:
        for _ in range(2):
            model(x).sum().backward()
    except RuntimeError as err:
        return {"find_unused_parameters": find_unused, "error": str(err).splitlines()[0]}
    return {"find_unused_parameters": find_unused, "error": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/comm_torch.json")
    args = ap.parse_args()
    rank, world, device = setup()
    report = {
        "world": world, "device": str(device), "backend": dist.get_backend(),
        "accumulation": [accumulation(world, rank, device, 1, True),
                         accumulation(world, rank, device, 4, False),
                         accumulation(world, rank, device, 4, True),
                         accumulation(world, rank, device, 1, True, compress=True)],
        "buckets": [buckets(device, cap) for cap in (None, 0.5, 4)],
        "broadcasts": [broadcasts(device, b) for b in (True, False)],
        "unused": [unused_parameters(device, f) for f in (False, True)],
    }
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(report, f)
        for run in report["accumulation"]:
            print(f"accum {run['accum']}, no_sync {run['no_sync']!s:5}, compress "
                  f"{run['compress']!s:5}: {run['steps']} steps, {run['backwards']} "
                  f"backwards, {run['allreduces']} all-reduces, {run['bytes']:,} bytes "
                  f"({run['dtype']})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
