"""Compute and all-reduce, one after the other or overlapped (PyTorch, gloo on CPUs).

    torchrun --nproc-per-node 2 comm_overlap_torch.py --out DIR

Each rank runs CHUNKS matrix products (the backward pass of CHUNKS layers, one product
each) and all-reduces a "gradient" after each, twice: first all compute and then every
all-reduce; then each all-reduce started with async_op=True as soon as its chunk is
done, waiting once at the end. Every rank writes its timestamps (time.perf_counter_ns,
one clock for all processes of a machine) and its checks to DIR/rank<r>.json.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--size", type=int, default=768)           # products of size x size
parser.add_argument("--chunks", type=int, default=6)
parser.add_argument("--numel", type=int, default=2_000_000)    # gradient size, float32
args = parser.parse_args()

dist.init_process_group("gloo")            # torchrun set RANK, WORLD_SIZE, MASTER_ADDR
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.randn(args.size, args.size, generator=torch.Generator().manual_seed(rank))
clock = time.perf_counter_ns


def gradient(i):
    return torch.full((args.numel,), float(rank + 1 + i))


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
    correct.append(g[0].item() == expected(i))
sequential_s = (clock() - t0) / 1e9

# 2. Overlapped: start each all-reduce as soon as its chunk is done, keep computing.
dist.barrier()
t0 = clock()
pending = []
for i in range(args.chunks):
    s = clock()
    x @ x
    records.append(("overlapped", "compute", f"chunk {i}", s, clock()))
    g = gradient(i)
    issued = clock()
    work = dist.all_reduce(g, async_op=True)          # returns at once
    done = []                                         # when gloo finished it
    work.get_future().then(lambda _, done=done: done.append(clock()))
    pending.append((i, g, work, issued, done))
previous_end = 0
for i, g, work, issued, done in pending:
    work.wait()                                       # g holds the sum only after this
    # gloo runs a process group's collectives one after another: each starts when it
    # was issued or when the one before it ended, whichever is later
    start = max(issued, previous_end)
    end = max(start, done[0] if done else clock())
    records.append(("overlapped", "comm", f"all-reduce {i}", start, end))
    previous_end = end
    correct.append(g[0].item() == expected(i))
overlapped_s = (clock() - t0) / 1e9

with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
    json.dump({"rank": rank, "world": world, "records": records,
               "sequential_s": sequential_s, "overlapped_s": overlapped_s,
               "sums_correct": all(correct), "threads": torch.get_num_threads()}, f)
dist.destroy_process_group()
