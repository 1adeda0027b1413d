"""Time all-reduce and all-gather of several sizes, over all ranks and over pairs of
ranks (the pairs at the same time, as the tensor-parallel groups of a 2-D mesh run).

    python -m paddle.distributed.launch --nproc_per_node 4 sweep_paddle.py
    python -m paddle.distributed.launch --gpus 0,1,2,3 sweep_paddle.py --device gpu
"""
import argparse
import json
import statistics
import time

import paddle
import paddle.distributed as dist

SIZES = [2**k for k in range(12, 23, 2)]     # bytes of the full tensor: 4 KiB .. 4 MiB


def sync(device: str) -> None:
    if device != "cpu":                      # a GPU runs asynchronously: wait for it
        sync(device)


def timed(op: str, nbytes: int, group, device: str, repeats: int) -> float:
    """Median seconds of one collective, as the slowest rank of the group saw it."""
    p = group.nranks
    if op == "all_reduce":
        x = paddle.ones([nbytes // 4])
        run = lambda: dist.all_reduce(x, group=group)  # noqa: E731
    else:    # every rank brings 1/p of the tensor and gets all of it
        x = paddle.ones([nbytes // 4 // p])
        run = lambda: dist.all_gather([], x, group=group)  # noqa: E731
    run()                                    # warm-up
    times = []
    for _ in range(repeats):
        dist.barrier(group=group)
        sync(device)
        t0 = time.perf_counter()
        run()
        sync(device)
        times.append(time.perf_counter() - t0)
    slowest = paddle.to_tensor([statistics.median(times)])
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return slowest.item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    paddle.set_device(args.device)
    dist.init_parallel_env()
    world, rank = dist.get_world_size(), dist.get_rank()
    # the pairs are the "tp" groups of a (world/2) x 2 mesh: ranks 0-1, 2-3, ...
    mesh = dist.ProcessMesh([[2 * i, 2 * i + 1] for i in range(world // 2)],
                            dim_names=["dp", "tp"])
    groups = {world: dist.get_group(), 2: mesh.get_group("tp")}
    rows = []
    for p, group in groups.items():
        for op in ("all_reduce", "all_gather"):
            for nbytes in SIZES:
                s = timed(op, nbytes, group, args.device, args.repeats)
                rows.append({"op": op, "ranks": p, "bytes": nbytes, "s": s})
    if rank == 0:
        print(f"{world} ranks on {args.device}, median of {args.repeats} "
              "(slowest rank):")
        for r in rows:
            print(f"  {r['op']:<10} over {r['ranks']} ranks, "
                  f"{r['bytes'] / 1024:6.0f} KiB: {r['s'] * 1e3:8.3f} ms")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "device": args.device, "rows": rows}, f)


if __name__ == "__main__":
    main()
