"""Data-parallel training with PyTorch's DistributedDataParallel (DDP).

    torchrun --standalone --nproc_per_node 2 ddp_torch.py   # 2 processes, this machine
    python ddp_torch.py                                     # 1 process, no launcher

One process per device: with a GPU for every process, process LOCAL_RANK drives
cuda:LOCAL_RANK and the processes talk over NCCL; otherwise they run on the CPU over
gloo. The global batch (--global-batch) is fixed, so one process or several, every
optimizer step sees the same rows and the runs end with the same weights. If the
checkpoint exists, training continues from it: a restarted job resumes.
"""
import argparse
import os
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def setup() -> tuple[int, int, torch.device]:
    """This process's rank, the world size and its device, from what torchrun sets."""
    if "RANK" not in os.environ:                     # started without a launcher
        return 0, 1, torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])       # this process's index on its node
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:                                            # no GPU for every process
        device, backend = torch.device("cpu"), "gloo"
    # reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; device_id binds a GPU rank to its GPU
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    master = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    print(f"rank {rank} of {world}: LOCAL_RANK {local_rank}, rendezvous at {master}, "
          f"{backend} on {device}\n", end="", flush=True)   # one write: ranks share stdout
    return rank, world, device


def make_data(n: int = 512, d_in: int = 32, d_out: int = 4) -> TensorDataset:
    """A regression data set, the same in every process (and in ddp_paddle.py)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d_in), dtype=np.float32)
    w = rng.standard_normal((d_in, d_out), dtype=np.float32) / d_in**0.5
    y = np.tanh(x @ w) + 0.1 * rng.standard_normal((n, d_out), dtype=np.float32)
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))


def make_model(d_in: int = 32, hidden: int = 64, d_out: int = 4) -> nn.Module:
    torch.manual_seed(0)            # the same initial weights in every process
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))


def train_epoch(model: nn.Module, loader: DataLoader, opt: torch.optim.Optimizer,
                device: torch.device, accum: int = 1) -> torch.Tensor:
    """One pass over this process's shard, `accum` micro-batches per optimizer step.

    DDP all-reduces the gradients during every backward, except inside `no_sync()`:
    there they only accumulate locally, and the next synchronized backward all-reduces
    the sum. Returns (sum of the losses, number of rows) over this shard.
    """
    total = torch.zeros(2, device=device)
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        last = (i + 1) % accum == 0                  # the micro-batch that all-reduces
        sync = last or not isinstance(model, DDP)
        with nullcontext() if sync else model.no_sync():
            loss = nn.functional.mse_loss(model(x), y)
            (loss / accum).backward()                # average over the micro-batches
        if last:
            opt.step()
            opt.zero_grad(set_to_none=True)
        rows = loss.new_tensor(len(x))
        total += torch.stack([loss.detach() * rows, rows])
    return total


def save_checkpoint(path: str, model: nn.Module, opt: torch.optim.Optimizer,
                    epoch: int, rank: int) -> None:
    if rank == 0:                                    # one writer
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "epoch": epoch}, path)
    if dist.is_initialized():
        dist.barrier()                               # nobody reads it half written


def load_checkpoint(path: str, model: nn.Module, opt: torch.optim.Optimizer,
                    device: torch.device) -> int:
    """Every process loads the file: the weights, and the optimizer's momentum, which
    DDP never synchronizes. Returns the epoch to continue from."""
    state = torch.load(path, map_location=device)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    return state["epoch"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=32, help="rows per step")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per step")
    ap.add_argument("--lr", type=float, default=0.05, help="for a global batch of 32")
    ap.add_argument("--checkpoint", default="runs/ddp_torch.pt",
                    help="written after each epoch; resumed from if it exists")
    args = ap.parse_args()

    rank, world, device = setup()
    micro = args.global_batch // (world * args.accum)  # rows per process per backward
    if micro * world * args.accum != args.global_batch:
        raise SystemExit(f"--global-batch {args.global_batch} does not split into "
                         f"{world} processes x {args.accum} micro-batches")
    lr = args.lr * args.global_batch / 32        # linear scaling with the global batch
    if rank == 0:
        print(f"{world} process(es) x {micro} rows x {args.accum} micro-batch(es) = "
              f"{args.global_batch} rows per step, lr {lr:g}", flush=True)

    data = make_data()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(data, batch_size=micro, sampler=sampler, drop_last=True)
    net = make_model().to(device)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    start = 0
    if os.path.exists(args.checkpoint):          # a restarted job continues
        start = load_checkpoint(args.checkpoint, net, opt, device)
        if rank == 0:
            print(f"resumed from {args.checkpoint} at epoch {start}", flush=True)
    # DDP broadcasts rank 0's parameters and buffers here; it all-reduces gradients.
    if dist.is_initialized():
        model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    else:
        model = net

    os.makedirs(os.path.dirname(args.checkpoint) or ".", exist_ok=True)
    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)             # a new order, the same on every rank
        totals = train_epoch(model, loader, opt, device, args.accum)
        if dist.is_initialized():
            dist.all_reduce(totals)                  # sum the losses over all ranks
        if rank == 0:
            loss_sum, rows = totals.tolist()
            print(f"epoch {epoch}: mean loss {loss_sum / rows:.6f} "
                  f"over {rows:.0f} rows", flush=True)
        save_checkpoint(args.checkpoint, net, opt, epoch + 1, rank)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
