"""Compute and all-reduce, one after the other or overlapped (Paddle, gloo on CPUs).

    OMP_NUM_THREADS=1 python -m paddle.distributed.launch --nproc_per_node 2 \
        comm_overlap_paddle.py --out DIR

Each rank runs CHUNKS matrix products (the backward pass of CHUNKS layers, one product
each) and all-reduces a "gradient" after each, twice: first all compute and then every
all-reduce; then each all-reduce started with sync_op=False as soon as its chunk is
done, waiting once at the end. Every rank writes its timestamps (time.perf_counter_ns,
one clock for all processes of a machine) and its checks to DIR/rank<r>.json.
"""
import argparse
import json
import os
import time

import numpy as np
import paddle
import paddle.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--size", type=int, default=768)           # products of size x size
parser.add_argument("--chunks", type=int, default=6)
parser.add_argument("--numel", type=int, default=2_000_000)    # gradient size, float32
args = parser.parse_args()

paddle.set_device("cpu")
dist.init_parallel_env()                   # the launcher set PADDLE_TRAINER_ID, ...
rank, world = dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(rank)
x = paddle.to_tensor(rng.standard_normal((args.size, args.size), dtype=np.float32))
clock = time.perf_counter_ns


def gradient(i):
    return paddle.full([args.numel], float(rank + 1 + i), dtype="float32")


def expected(i):                           # the sum of every rank's gradient(i)
    return float(sum(r + 1 + i for r in range(world)))


records, correct = [], []
x @ x                                      # warm-up: the first product and the first
dist.all_reduce(gradient(0))               # collective pay one-off set-up costs

# 1. Sequential: all compute, then every all-reduce.
dist.barrier()
t0 = clock()
grads = []
for i in range(args.chunks):
    s = clock()
    x @ x
    records.append(("sequential", "compute", f"chunk {i}", s, clock()))
    grads.append(gradient(i))
for i, g in enumerate(grads):
    s = clock()
    dist.all_reduce(g)
    records.append(("sequential", "comm", f"all-reduce {i}", s, clock()))
    correct.append(float(g[0]) == expected(i))
sequential_s = (clock() - t0) / 1e9

# 2. Overlapped: start each all-reduce as soon as its chunk is done, keep computing.
dist.barrier()
t0 = clock()
pending, already_done = [], []
for i in range(args.chunks):
    s = clock()
    x @ x
    records.append(("overlapped", "compute", f"chunk {i}", s, clock()))
    g = gradient(i)
    issued = clock()
    task = dist.all_reduce(g, sync_op=False)          # a task to wait on
    returned = clock()
    already_done.append(task.is_completed())          # finished before it returned?
    pending.append((i, g, task, issued, returned))
previous_end = 0
for (i, g, task, issued, returned), done in zip(pending, already_done):
    task.wait()                                       # g holds the sum only after this
    # A task that was complete when all_reduce returned ran inside the call; otherwise
    # the moment wait() returns is the latest it can have ended.
    start = max(issued, previous_end)
    end = returned if done else max(start, clock())
    records.append(("overlapped", "comm", f"all-reduce {i}", start, end))
    previous_end = end
    correct.append(float(g[0]) == expected(i))
overlapped_s = (clock() - t0) / 1e9

with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
    json.dump({"rank": rank, "world": world, "records": records,
               "sequential_s": sequential_s, "overlapped_s": overlapped_s,
               "sums_correct": all(correct), "ran_inside_the_call": all(already_done),
               "threads": int(os.environ.get("OMP_NUM_THREADS", "0"))}, f)
