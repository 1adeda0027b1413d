"""Ring attention by hand on torch.distributed ranks (Liu et al. 2023).

The sequence is cut into 2N chunks. Each of the N ranks keeps the queries of two chunks
and, to begin with, the keys and values of the same two. At each of N steps a rank
computes attention of its queries against the key/value block it holds, sends that block
to the next rank with `isend` and receives the previous rank's with `irecv` while it
computes; after N steps every query has met every key. The partial results of the steps
are merged with the online softmax: each block's output is kept normalised, with the
log-sum-exp of its scores, and two blocks merge as a weighted mean.

Layouts: "contiguous" gives rank r chunks 2r and 2r+1; "zigzag" gives it chunks r and
2N-1-r, so that under a causal mask every rank has as much to compute. A chunk pair whose
scores are all masked (keys later than every query) is skipped and not counted.

    torchrun --standalone --nproc_per_node 4 ring_attention_torch.py --out ring.json
"""
import argparse
import json
import math
import os
import textwrap
import time

import torch
import torch.distributed as dist

HEADS, HEAD_DIM = 4, 16           # TinyGPT's attention: width 64 in 4 heads
SEQ = 1024                        # a long sequence: what context parallelism is for
REPEATS = 5                       # timed repeats of every configuration, after one
DEVICE = "cpu"                    # or this rank's GPU ("cuda:N"), from --device


def clock() -> float:
    """Seconds of this thread's CPU time on CPU ranks (what the rank computed, however
    many processes share the cores); on a GPU, wall time after its queued work ends."""
    if DEVICE == "cpu":
        return time.thread_time()
    torch.cuda.synchronize()
    return time.perf_counter()


def chunks_of(rank: int, world: int, layout: str) -> list[int]:
    """The two chunk numbers (of 2 * world) whose queries and keys `rank` holds."""
    if layout == "contiguous":
        return [2 * rank, 2 * rank + 1]
    return [rank, 2 * world - 1 - rank]                          # zigzag


def block_attention(q, k, v, causal_diagonal: bool):
    """Attention of one query chunk over one key chunk: the output normalised within
    the block, (heads, c, d), and the log-sum-exp of each row's scores, (heads, c)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM)        # (heads, c, c)
    if causal_diagonal:    # the same chunk: a query sees the keys up to its own
        c = q.shape[1]
        future = torch.ones(c, c, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                          # (heads, c)
    return torch.exp(scores - lse.unsqueeze(-1)) @ v, lse


def merge(out, lse, block_out, block_lse):
    """The online-softmax merge of two partial results over disjoint sets of keys:
    softmax over the union weighs each part by its share exp(lse_part - lse_all)."""
    if out is None:
        return block_out, block_lse
    new_lse = torch.logaddexp(lse, block_lse)                      # (heads, c)
    out = (torch.exp(lse - new_lse).unsqueeze(-1) * out
           + torch.exp(block_lse - new_lse).unsqueeze(-1) * block_out)
    return out, new_lse


SENT: list = []     # bytes of each block this rank sent in its last ring


def ring_attention(q_chunks, kv, layout, causal, rank, world):
    """One rank's share of attention. q_chunks: its query chunks; kv: its keys and
    values stacked, (2, heads, 2c, d), its two chunks side by side. Returns the outputs
    of its query chunks, and what it computed (chunk pairs, and seconds of CPU time)."""
    my_chunks = chunks_of(rank, world, layout)
    c = q_chunks[0].shape[1]
    results = [(None, None) for _ in q_chunks]
    pairs, busy = 0, 0.0
    SENT.clear()
    for step in range(world):
        holder = (rank - step) % world          # whose chunks the block came from
        kv_chunks = chunks_of(holder, world, layout)
        k, v = kv
        if step < world - 1:                    # pass the block on while computing
            incoming = torch.empty_like(kv)
            reqs = [dist.isend(kv, (rank + 1) % world),
                    dist.irecv(incoming, (rank - 1) % world)]
            SENT.append(kv.numel() * kv.element_size())
        start = clock()
        for i, (qi, q) in enumerate(zip(my_chunks, q_chunks)):
            for j, kj in enumerate(kv_chunks):
                if causal and kj > qi:          # every key after every query: skipped
                    continue
                block = block_attention(q, k[:, j * c:(j + 1) * c],
                                        v[:, j * c:(j + 1) * c], causal and kj == qi)
                results[i] = merge(*results[i], *block)
                pairs += 1
        busy += clock() - start
        if step < world - 1:
            for req in reqs:
                req.wait()
            kv = incoming
    return [out for out, _ in results], pairs, busy


def full_attention(q, k, v, causal):
    """The one-process reference: softmax over the whole sequence, (heads, SEQ, d)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM)
    if causal:
        future = torch.ones(SEQ, SEQ, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return scores.softmax(-1) @ v


def try_context_parallel(q, k, v, world):
    """PyTorch's own context parallelism: SDPA under `context_parallel`, which shards
    the buffers along the sequence (in place) and runs a ring inside the attention
    call; `context_parallel_unshard` gathers the output back in sequence order."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    # not exported yet in 2.13; PyTorch's context-parallel tutorial imports it so
    from torch.distributed.tensor.experimental._attention import (
        context_parallel_unshard)
    from torch.nn.functional import scaled_dot_product_attention

    want = full_attention(q, k, v, causal=True)
    mesh = init_device_mesh(DEVICE.split(":")[0], (world,))
    q, k, v = (t.unsqueeze(0).clone() for t in (q, k, v))       # (1, heads, SEQ, d)
    try:
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            out = scaled_dot_product_attention(q, k, v, is_causal=True)
            shards = [t.clone() for t in (q, k, v)]   # the buffers hold this rank's rows
        (whole,) = context_parallel_unshard(mesh, [out], [2])
        diff = (whole[0] - want).abs().max().item()
        # attention within the rank's own rows alone, outside the context
        alone = scaled_dot_product_attention(*shards, is_causal=True)
        local = (out - alone).abs().max().item()
        return (f"ran: each rank computed {out.shape[2]} of the {SEQ} query rows; "
                f"largest difference from full attention {diff:.1e}, from attention "
                f"within the rank's own rows alone {local:.1e}"), (diff, local)
    except Exception as err:    # shown on the page as PyTorch printed it
        return f"{type(err).__name__}: {str(err).strip().splitlines()[0]}", (None, None)


def experiment(device: str = "cpu", out_file: str | None = None) -> None:
    """The three configurations and PyTorch's own context parallelism, on the process
    group already started; rank 0 prints a line for each and writes `out_file`."""
    global DEVICE
    rank, world = dist.get_rank(), dist.get_world_size()
    DEVICE = "cpu" if device == "cpu" else f"cuda:{os.environ['LOCAL_RANK']}"
    torch.manual_seed(0)                    # the same q, k, v on every rank
    if DEVICE != "cpu":
        torch.cuda.set_device(DEVICE)
    q, k, v = torch.randn(3, HEADS, SEQ, HEAD_DIM).to(DEVICE).unbind(0)
    c = SEQ // (2 * world)
    chunk = lambda t, i: t[:, i * c:(i + 1) * c]
    runs = []
    for layout, causal in (("contiguous", False), ("contiguous", True),
                           ("zigzag", True)):
        mine = chunks_of(rank, world, layout)
        q_chunks = [chunk(q, i) for i in mine]
        kv = torch.stack([torch.cat([chunk(k, i) for i in mine], 1),
                          torch.cat([chunk(v, i) for i in mine], 1)])
        walls, busies = [], []
        for repeat in range(REPEATS + 1):          # the first is a warm-up
            dist.barrier()
            start = time.perf_counter()
            outs, pairs, busy = ring_attention(q_chunks, kv, layout, causal, rank, world)
            if repeat:
                walls.append(time.perf_counter() - start)
                busies.append(busy)
        want = full_attention(q, k, v, causal)
        diff = max((o - chunk(want, i)).abs().max().item() for o, i in zip(outs, mine))
        mine_stats = {"rank": rank, "chunks": mine, "pairs": pairs, "busy_s": busies,
                      "wall_s": walls, "max_diff": diff, "sent_bytes": sum(SENT)}
        every = [None] * world
        dist.all_gather_object(every, mine_stats)
        runs.append({"layout": layout, "causal": causal, "ranks": every})
        if rank == 0:
            worst = max(r["max_diff"] for r in every)
            print(f"{layout:>10}, {'causal' if causal else 'no mask'}: chunk pairs "
                  f"per rank {[r['pairs'] for r in every]},\n    largest difference from "
                  f"full attention {worst:.1e}")
    cp, cp_diff = try_context_parallel(q, k, v, world)
    if rank == 0:
        print(f"torch.distributed.tensor.experimental.context_parallel on {device}:")
        print(textwrap.fill(cp, 88, initial_indent="    ", subsequent_indent="    "))
        if out_file:
            os.makedirs(os.path.dirname(out_file) or ".", exist_ok=True)
            with open(out_file, "w") as f:
                json.dump({"framework": "PyTorch", "world": world, "seq": SEQ,
                           "heads": HEADS, "head_dim": HEAD_DIM, "chunk": c,
                           "runs": runs, "context_parallel": cp,
                           "context_parallel_diff": cp_diff[0],
                           "context_parallel_local_diff": cp_diff[1]}, f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None, help="JSON file rank 0 writes")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    dist.init_process_group("gloo" if args.device == "cpu" else "nccl")
    experiment(args.device, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
