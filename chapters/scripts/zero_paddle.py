"""ZeRO's stages in Paddle: what each rank holds and sends, and the weights it ends
with, against training the whole model in one process.

    python -m paddle.distributed.launch --nproc_per_node 2 zero_paddle.py --all
    python -m paddle.distributed.launch --nproc_per_node 4 zero_paddle.py
    python -m paddle.distributed.launch --gpus 0,1 zero_paddle.py --device gpu --all
    python -m paddle.distributed.launch --gpus 0,1,2,3 zero_paddle.py --device gpu \
        --dp 2

Paddle has three ways to shard the optimizer. With --all the script tries each:

  dist.shard_optimizer(opt, dist.ShardingStage1/2/3("dp", mesh))   (auto-parallel API)
  paddle.distributed.sharding.group_sharded_parallel(model, opt, level="os"|"os_g"|
                                                     "p_g_os")      (stages 1, 2, 3)
  fleet's hybrid parallelism with sharding_degree > 1               (stage 1)

(With --dp 2, fleet's ranks form a 2-D grid: ZeRO-1 inside groups of world/2 ranks, data
parallel across the two groups.)

Then it trains each of --strategies next to a whole copy of the model:

  DP      paddle.DataParallel and Adam: every rank holds everything
  ZeRO-1  fleet's sharding (DygraphShardingOptimizer): Adam's state split over ranks
"""
import argparse
import contextlib
import json
import time
import traceback
from collections import Counter

import paddle
import paddle.distributed as dist
from paddle.distributed import fleet
from paddle.distributed.sharding import group_sharded_parallel

from tinygpt_paddle import BATCH, TinyGPT, batch, loss_fn

STEPS, LR = 4, 3e-3   # step 0 warms up, 1-2 are timed, 3 is watched
calls = []            # the collectives this rank starts: (name, bytes, ranks)


def counted(name: str):
    """paddle.distributed.<name>, logging each call it serves."""
    collective = getattr(dist, name)

    def call(tensor, *args, **kwargs):
        group = kwargs.get("group")
        ranks = group.nranks if group is not None else dist.get_world_size()
        if ranks > 1:
            calls.append((name, tensor.numel().item() * tensor.element_size(), ranks))
        return collective(tensor, *args, **kwargs)

    return call


for _name in ("all_reduce", "reduce", "broadcast"):
    setattr(dist, _name, counted(_name))   # fleet calls paddle.distributed.<name>


def nbytes(tensors) -> int:
    return sum(t.numel().item() * t.element_size() for t in tensors)


def try_shard_optimizer(mesh) -> None:
    """The auto-parallel API: the stage is a property of the optimizer."""
    for stage in (dist.ShardingStage1, dist.ShardingStage2, dist.ShardingStage3):
        try:
            model = TinyGPT()
            # (shard_optimizer takes AdamW or SGD; AdamW without decay is Adam)
            opt = paddle.optimizer.AdamW(learning_rate=LR, weight_decay=0.0,
                                         parameters=model.parameters())
            opt = dist.shard_optimizer(opt, stage("dp", mesh))
            x, y = (dist.shard_tensor(t, mesh, [dist.Shard(0)]) for t in batch(0))
            loss_fn(model(x), y).backward()
            opt.step()
            opt.clear_grad()
            held = [p._local_value() for p in model.parameters()]
            state = [v._local_value() for v in opt.state_dict().values()
                     if isinstance(v, paddle.Tensor)]
            print(f"dist.shard_optimizer, {stage.__name__}: ran; this rank holds "
                  f"{nbytes(held) / 2**20:.3f} MiB of parameters, "
                  f"{nbytes(state) / 2**20:.3f} MiB of optimizer state")
        except Exception as e:
            print(f"dist.shard_optimizer, {stage.__name__}: {type(e).__name__}: "
                  f"{str(e).strip().splitlines()[0]}")


def try_group_sharded() -> None:
    for level in ("os", "os_g", "p_g_os"):
        try:
            model = TinyGPT()
            opt = paddle.optimizer.Adam(learning_rate=LR, parameters=model.parameters())
            model, opt, _ = group_sharded_parallel(model, opt, level=level)
            print(f"group_sharded_parallel, level={level!r}: ready")
        except Exception as e:
            print(f"group_sharded_parallel, level={level!r}: {type(e).__name__}: "
                  f"{str(e).strip().splitlines()[0]}")


def optimizer_state(opt) -> list:
    """The optimizer state this rank holds (fleet's sharded optimizer keeps only that
    of the parameters it updates)."""
    return [v for v in opt.state_dict().values() if isinstance(v, paddle.Tensor)]


def train(strategy: str, rank: int, world: int) -> dict:
    net = TinyGPT()
    rows = BATCH // world                               # this rank's rows of a batch
    if strategy == "DP":
        model = paddle.DataParallel(net)                # all-reduces in backward
    else:                      # ZeRO-1: fleet shards the optimizer over sharding_degree
        model = fleet.distributed_model(net)
    opt = paddle.optimizer.Adam(learning_rate=LR, parameters=net.parameters())
    if strategy == "ZeRO-1":
        opt = fleet.distributed_optimizer(opt)
    params = {p.data_ptr() for p in net.parameters()}
    saved = {}

    def pack(t):                       # autograd saves `t` for the backward pass
        if t.data_ptr() not in params:  # a weight saved by a product is not new memory
            saved[t.data_ptr()] = t.numel().item() * t.element_size()
        return t

    times, losses = [], []
    for step in range(STEPS):
        x, y = (t[rank * rows:(rank + 1) * rows] for t in batch(step))
        last = step == STEPS - 1
        calls.clear()
        saved.clear()
        hooks = paddle.autograd.saved_tensors_hooks(pack, lambda t: t)
        dist.barrier()
        start = time.perf_counter()
        with hooks if last else contextlib.nullcontext():
            loss = loss_fn(model(x), y)
        loss.backward()
        grads = nbytes(p.grad for p in net.parameters() if p.grad is not None)
        opt.step()
        opt.clear_grad()
        times.append(time.perf_counter() - start)
        if last:
            log = list(calls)
        mean = loss.detach().clone()
        dist.all_reduce(mean)                             # the whole batch's loss
        losses.append(float(mean) / world)
    return {"strategy": strategy, "net": net, "times": times[1:-1], "losses": losses,
            "collectives": log,
            "memory": {"params": nbytes(net.parameters()), "grads": grads,
                       "optimizer": nbytes(optimizer_state(opt)),
                       "activations": sum(saved.values())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--strategies", default="DP,ZeRO-1", help="DP, ZeRO-1 or both")
    ap.add_argument("--dp", type=int, default=1,
                    help="fleet's dp_degree: ZeRO-1 inside groups of world/dp ranks, "
                         "data parallel across the groups (a 2-D grid)")
    ap.add_argument("--all", action="store_true",
                    help="first try shard_optimizer and group_sharded_parallel")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    paddle.set_device(args.device)
    world = dist.get_world_size()
    if BATCH % world or world % args.dp:
        raise SystemExit(f"{BATCH} sequences per step over {world} ranks in --dp "
                         f"{args.dp} groups do not split evenly")
    strategies = args.strategies.split(",")
    if "ZeRO-1" in strategies:       # fleet: every rank in one sharding group
        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": args.dp, "mp_degree": 1,
                                   "pp_degree": 1, "sharding_degree": world // args.dp}
        fleet.init(is_collective=True, strategy=strategy)
    else:
        dist.init_parallel_env()
    rank = dist.get_rank()
    if args.all:
        try_shard_optimizer(dist.ProcessMesh(list(range(world)), dim_names=["dp"]))
        try_group_sharded()

    whole = TinyGPT()                         # the reference: one process, whole model
    opt = paddle.optimizer.Adam(learning_rate=LR, parameters=whole.parameters())
    ref_losses, ref_times = [], []
    for step in range(STEPS):
        x, y = batch(step)
        start = time.perf_counter()
        loss = loss_fn(whole(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        ref_times.append(time.perf_counter() - start)
        ref_losses.append(float(loss))
    reference = whole.state_dict()
    start = TinyGPT().state_dict()

    runs = []
    for strategy in strategies:
        run = train(strategy, rank, world)
        state = run.pop("net").state_dict()
        run["weight_diff"] = max(float((w - reference[k]).abs().max())
                                 for k, w in state.items())
        run["moved"] = max(float((w - start[k]).abs().max()) for k, w in state.items())
        run["loss_diff"] = max(abs(a - b) for a, b in zip(run["losses"], ref_losses))
        everyone = []
        dist.all_gather_object(everyone, run["memory"])   # every rank's memory
        run["memory_per_rank"] = everyone
        runs.append(run)
    if rank == 0:
        print(f"TinyGPT, {sum(w.numel().item() for w in reference.values())} "
              f"parameters, {STEPS} Adam steps on {world} ranks ({args.device})")
        print(f"{'':12}{'MiB per rank: params':>22}{'grads':>8}{'Adam':>8}{'activ.':>8}"
              f"   collectives per step")
        for run in runs:
            m = run["memory"]
            ops = Counter(op for op, _, _ in run["collectives"])
            print(f"{run['strategy']:<12}{m['params'] / 2**20:22.3f}"
                  f"{m['grads'] / 2**20:8.3f}{m['optimizer'] / 2**20:8.3f}"
                  f"{m['activations'] / 2**20:8.3f}   "
                  + (", ".join(f"{n} {op}" for op, n in sorted(ops.items()))
                     or "(in DataParallel's C++ reducer)"))
        print("largest difference from one process: "
              + ", ".join(f"{r['strategy']} {r['weight_diff']:.1e}" for r in runs))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "device": args.device, "runs": runs,
                           "ref_losses": ref_losses, "ref_times": ref_times[1:]}, f)


if __name__ == "__main__":
    main()
