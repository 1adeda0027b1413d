"""What paddle.DataParallel communicates.

    GLOG_minloglevel=0 GLOG_vmodule=reducer=4 python -m paddle.distributed.launch \\
        --nproc_per_node 2 --log_dir runs/comm_paddle ddp_comm_paddle.py

Uses the data, model and training loop of ddp_paddle.py. DataParallel has no
communication hook; with GLOG_vmodule=reducer=4 its reducer logs "start
fused_allreduce" for each group it all-reduces, in each rank's log (workerlog.N). Each
experiment prints a line starting with "===" first, so the log can be cut into
experiments. Rank 0 writes the rest of what it measured to --out as JSON.
"""
import argparse
import json
import os

import numpy as np
import paddle
import paddle.distributed as dist
from paddle.distributed import fleet
from paddle.io import DataLoader, DistributedBatchSampler

from ddp_paddle import make_data, make_model, setup, train_epoch


def flat(net: paddle.nn.Layer) -> np.ndarray:
    return np.concatenate([p.numpy().ravel() for p in net.parameters()])


def spread(t: paddle.Tensor) -> float:
    """The largest difference between this tensor on rank 0 and on rank 1."""
    copies = []
    dist.all_gather(copies, t.detach().clone())
    return float((copies[0] - copies[1]).abs().max())


def accumulation(world: int, rank: int, accum: int,
                 use_no_sync: bool) -> tuple[dict, np.ndarray]:
    """One epoch at a global batch of 32 rows in `accum` micro-batches per step."""
    print(f"=== accum {accum}, no_sync {use_no_sync}", flush=True)
    net = make_model()
    model = paddle.DataParallel(net)
    opt = paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.9,
                                    parameters=net.parameters())
    data = make_data()
    sampler = DistributedBatchSampler(data, batch_size=32 // (world * accum),
                                      num_replicas=world, rank=rank)
    loader = DataLoader(data, batch_sampler=sampler)
    if use_no_sync:
        train_epoch(model, loader, opt, accum)
    else:           # accumulate without no_sync: every backward all-reduces
        for i, (x, y) in enumerate(loader):
            (paddle.nn.functional.mse_loss(model(x), y) / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.clear_grad()
    run = {"accum": accum, "no_sync": use_no_sync, "steps": len(loader) // accum,
           "backwards": len(loader)}
    return run, flat(net)


def groups(comm_mb: float, last_mb: float) -> dict:
    """Which parameters DataParallel all-reduces together (fixed at construction)."""
    net = make_model(256, 1024, 256)                    # two 1 MiB weight matrices
    model = paddle.DataParallel(net, comm_buffer_size=comm_mb,
                                last_comm_buffer_size=last_mb)
    names = [name for name, _ in net.named_parameters()]
    sizes = {n: p.numel().item() * p.element_size() for n, p in net.named_parameters()}
    return {"comm_buffer_size": comm_mb, "last_comm_buffer_size": last_mb,
            "groups": [[names[i] for i in g] for g in model.group_indices],
            "sizes": sizes}


def fp16_allreduce(rank: int) -> float:
    """Does fleet's fp16_allreduce option compress DataParallel's gradients? The
    largest difference between the gradients with and without it (0: not applied)."""
    strategy = fleet.DistributedStrategy()
    strategy.fp16_allreduce = True
    fleet.init(is_collective=True, strategy=strategy)
    grads = []
    for wrap in (fleet.distributed_model, paddle.DataParallel):
        net = make_model()
        model = wrap(net)
        paddle.seed(1 + rank)                             # different rows on each rank
        model(paddle.randn([16, 32])).sum().backward()
        grads.append(net[0].weight.grad.numpy())
    return float(np.abs(grads[0] - grads[1]).max())


def buffers(rank: int) -> dict:
    """BatchNorm's running mean: synchronized when DataParallel wraps the model, then
    kept per rank."""
    paddle.seed(rank)                                     # different weights per rank
    net = paddle.nn.Sequential(paddle.nn.Linear(32, 64), paddle.nn.BatchNorm1D(64),
                               paddle.nn.ReLU(), paddle.nn.Linear(64, 4))
    before = spread(net[0].weight)
    model = paddle.DataParallel(net)
    wrapped = spread(net[0].weight)
    opt = paddle.optimizer.SGD(learning_rate=0.05, parameters=net.parameters())
    for _ in range(4):
        model(paddle.randn([16, 32]) + rank).sum().backward()    # different rows
        opt.step()
        opt.clear_grad()
    return {"weight_before_wrapping": before, "weight_after_wrapping": wrapped,
            "weight_after_4_steps": spread(net[0].weight),
            "running_mean_after_4_steps": spread(net[1]._mean)}


class TwoHeads(paddle.nn.Layer):
    """Two heads on one body; each step uses one of them (two alternating tasks)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = paddle.nn.Linear(32, 64)
        self.heads = paddle.nn.LayerList([paddle.nn.Linear(64, 4) for _ in range(2)])

    def forward(self, x: paddle.Tensor, task: int) -> paddle.Tensor:
        return self.heads[task](paddle.nn.functional.relu(self.body(x)))


def unused_parameters(find_unused: bool) -> dict:
    model = paddle.DataParallel(TwoHeads(), find_unused_parameters=find_unused)
    x = paddle.randn([16, 32])
    try:
        for step in range(2):
            model(x, task=step % 2).sum().backward()
    except RuntimeError as err:
        return {"find_unused_parameters": find_unused,
                "error": str(err).splitlines()[0]}
    return {"find_unused_parameters": find_unused, "error": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/comm_paddle.json")
    args = ap.parse_args()
    rank, world = setup()
    runs = [accumulation(world, rank, 1, True), accumulation(world, rank, 4, False),
            accumulation(world, rank, 4, True)]
    print("=== other experiments", flush=True)
    first = runs[0][1]
    report = {
        "world": world, "device": paddle.get_device(),
        "accumulation": [{**run, "max_diff": float(np.abs(w - first).max())}
                         for run, w in runs],
        "groups": [groups(25, 1), groups(1, 1), groups(0.5, 0.5)],
        "buffers": buffers(rank),
        "fp16_allreduce_grad_diff": fp16_allreduce(rank),
        "unused": [unused_parameters(f) for f in (True, False)],
    }
    if rank == 0:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
