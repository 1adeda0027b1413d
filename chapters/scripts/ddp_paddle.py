"""Data-parallel training with paddle.DataParallel.

    python -m paddle.distributed.launch --nproc_per_node 2 ddp_paddle.py   # 2 processes
    python ddp_paddle.py                                     # 1 process, no launcher

One process per device: with GPUs the launcher gives each process its own
(FLAGS_selected_gpus) and the processes talk over NCCL; on a machine without GPUs it
sets PADDLE_DISTRI_BACKEND=gloo and they run on the CPU. The global batch
(--global-batch) is fixed, so one process or several, every optimizer step sees the
same rows and the runs end with the same weights. If the checkpoint exists,
training continues from it: a restarted job resumes.
"""
import argparse
import os
from contextlib import nullcontext

import numpy as np
import paddle
import paddle.distributed as dist
from paddle.io import DataLoader, DistributedBatchSampler, TensorDataset


def setup() -> tuple[int, int]:
    """This process's rank and the world size, from what the launcher sets."""
    if "PADDLE_TRAINER_ID" not in os.environ:        # started without a launcher
        return 0, 1
    # Reads PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS,
    # PADDLE_CURRENT_ENDPOINT; puts this process on its GPU (or the CPU with gloo).
    dist.init_parallel_env()
    env = os.environ
    backend = env.get("PADDLE_DISTRI_BACKEND", "nccl")   # gloo: set by the launcher
    print(f"rank {env['PADDLE_TRAINER_ID']} of {env['PADDLE_TRAINERS_NUM']}: endpoint "
          f"{env['PADDLE_CURRENT_ENDPOINT']} of {env['PADDLE_TRAINER_ENDPOINTS']}, "
          f"{backend} on {paddle.get_device()}", flush=True)
    return dist.get_rank(), dist.get_world_size()


def make_data(n: int = 512, d_in: int = 32, d_out: int = 4) -> TensorDataset:
    """A regression data set, the same in every process (and in ddp_torch.py)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d_in), dtype=np.float32)
    w = rng.standard_normal((d_in, d_out), dtype=np.float32) / d_in**0.5
    y = np.tanh(x @ w) + 0.1 * rng.standard_normal((n, d_out), dtype=np.float32)
    return TensorDataset([paddle.to_tensor(x), paddle.to_tensor(y)])


def make_model(d_in: int = 32, hidden: int = 64, d_out: int = 4) -> paddle.nn.Layer:
    paddle.seed(0)                  # the same initial weights in every process
    return paddle.nn.Sequential(paddle.nn.Linear(d_in, hidden), paddle.nn.ReLU(),
                                paddle.nn.Linear(hidden, d_out))


def train_epoch(model: paddle.nn.Layer, loader: DataLoader,
                opt: paddle.optimizer.Optimizer, accum: int = 1) -> paddle.Tensor:
    """One pass over this process's shard, `accum` micro-batches per optimizer step.

    paddle.DataParallel all-reduces the gradients during every backward, except inside
    `no_sync()`: there they only accumulate locally, and the next synchronized backward
    all-reduces the sum. Returns (sum of the losses, number of rows) over this shard.
    """
    total = paddle.zeros([2])
    for i, (x, y) in enumerate(loader):
        last = (i + 1) % accum == 0                  # the micro-batch that all-reduces
        sync = last or not isinstance(model, paddle.DataParallel)
        with nullcontext() if sync else model.no_sync():
            loss = paddle.nn.functional.mse_loss(model(x), y)
            (loss / accum).backward()                # average over the micro-batches
        if last:
            opt.step()
            opt.clear_grad()
        rows = paddle.full([], len(x), "float32")
        total += paddle.stack([loss.detach() * rows, rows])
    return total


def save_checkpoint(path: str, model: paddle.nn.Layer, opt: paddle.optimizer.Optimizer,
                    epoch: int, rank: int) -> None:
    if rank == 0:                                    # one writer
        paddle.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                     "epoch": epoch}, path)
    if dist.get_world_size() > 1:
        dist.barrier()                               # nobody reads it half written


def load_checkpoint(path: str, model: paddle.nn.Layer,
                    opt: paddle.optimizer.Optimizer) -> int:
    """Every process loads the file: the weights, and the optimizer's momentum, which
    DataParallel never synchronizes. Returns the epoch to continue from."""
    state = paddle.load(path)
    model.set_state_dict(state["model"])
    opt.set_state_dict(state["optimizer"])
    return state["epoch"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=32, help="rows per step")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per step")
    ap.add_argument("--lr", type=float, default=0.05, help="for a global batch of 32")
    ap.add_argument("--checkpoint", default="runs/ddp_paddle.pdparams",
                    help="written after each epoch; resumed from if it exists")
    args = ap.parse_args()

    rank, world = setup()
    micro = args.global_batch // (world * args.accum)  # rows per process per backward
    if micro * world * args.accum != args.global_batch:
        raise SystemExit(f"--global-batch {args.global_batch} does not split into "
                         f"{world} processes x {args.accum} micro-batches")
    lr = args.lr * args.global_batch / 32        # linear scaling with the global batch
    if rank == 0:
        print(f"{world} process(es) x {micro} rows x {args.accum} micro-batch(es) = "
              f"{args.global_batch} rows per step, lr {lr:g}", flush=True)

    data = make_data()
    sampler = DistributedBatchSampler(data, batch_size=micro, num_replicas=world,
                                      rank=rank, shuffle=True, drop_last=True)
    loader = DataLoader(data, batch_sampler=sampler)
    net = make_model()
    opt = paddle.optimizer.Momentum(learning_rate=lr, momentum=0.9,
                                    parameters=net.parameters())
    start = 0
    if os.path.exists(args.checkpoint):          # a restarted job continues
        start = load_checkpoint(args.checkpoint, net, opt)
        if rank == 0:
            print(f"resumed from {args.checkpoint} at epoch {start}", flush=True)
    # DataParallel broadcasts rank 0's parameters and buffers here (once); it
    # all-reduces gradients.
    model = paddle.DataParallel(net) if world > 1 else net

    os.makedirs(os.path.dirname(args.checkpoint) or ".", exist_ok=True)
    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)             # a new order, the same on every rank
        totals = train_epoch(model, loader, opt, args.accum)
        if world > 1:
            dist.all_reduce(totals)                  # sum the losses over all ranks
        if rank == 0:
            loss_sum, rows = totals.tolist()
            print(f"epoch {epoch}: mean loss {loss_sum / rows:.6f} "
                  f"over {rows:.0f} rows", flush=True)
        save_checkpoint(args.checkpoint, net, opt, epoch + 1, rank)


if __name__ == "__main__":
    main()
