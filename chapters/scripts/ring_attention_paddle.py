"""Ring attention by hand on paddle.distributed ranks (Liu et al. 2023).

The sequence is cut into 2N chunks. Each of the N ranks keeps the queries of two chunks
and, to begin with, the keys and values of the same two. At each of N steps a rank
computes attention of its queries against the key/value block it holds and passes that
block on to the next rank (`isend`) while it receives the previous rank's (`irecv`);
after N steps every query has met every key. The partial results are merged with the
online softmax: each block's output is kept normalised, with the log-sum-exp of its
scores, and two blocks merge as a weighted mean.

Layouts: "contiguous" gives rank r chunks 2r and 2r+1; "zigzag" gives it chunks r and
2N-1-r, so that under a causal mask every rank has as much to compute. A chunk pair whose
scores are all masked (keys later than every query) is skipped and not counted.

    python -m paddle.distributed.launch --nproc_per_node 4 ring_attention_paddle.py
"""
import argparse
import json
import math
import os
import time

import numpy as np
import paddle
import paddle.distributed as dist

HEADS, HEAD_DIM = 4, 16           # TinyGPT's attention: width 64 in 4 heads
SEQ = 1024                        # a long sequence: what context parallelism is for
REPEATS = 5                       # timed repeats of every configuration, after one


def clock() -> float:
    """Seconds of this thread's CPU time on CPU ranks (what the rank computed, however
    many processes share the cores); on a GPU, wall time after its queued work ends."""
    if paddle.get_device() == "cpu":
        return time.thread_time()
    paddle.device.synchronize()
    return time.perf_counter()


def chunks_of(rank: int, world: int, layout: str) -> list[int]:
    """The two chunk numbers (of 2 * world) whose queries and keys `rank` holds."""
    if layout == "contiguous":
        return [2 * rank, 2 * rank + 1]
    return [rank, 2 * world - 1 - rank]                          # zigzag


def block_attention(q, k, v, causal_diagonal: bool):
    """Attention of one query chunk over one key chunk: the output normalised within
    the block, [heads, c, d], and the log-sum-exp of each row's scores, [heads, c]."""
    scores = paddle.matmul(q, k, transpose_y=True) / math.sqrt(HEAD_DIM)
    if causal_diagonal:    # the same chunk: a query sees the keys up to its own
        c = q.shape[1]
        future = paddle.triu(paddle.ones([c, c], dtype="bool"), 1)
        scores = paddle.masked_fill(scores, future, float("-inf"))
    lse = paddle.logsumexp(scores, axis=-1)                        # [heads, c]
    return paddle.matmul(paddle.exp(scores - lse.unsqueeze(-1)), v), lse


def merge(out, lse, block_out, block_lse):
    """The online-softmax merge of two partial results over disjoint sets of keys:
    softmax over the union weighs each part by its share exp(lse_part - lse_all)."""
    if out is None:
        return block_out, block_lse
    new_lse = paddle.logaddexp(lse, block_lse)                     # [heads, c]
    out = (paddle.exp(lse - new_lse).unsqueeze(-1) * out
           + paddle.exp(block_lse - new_lse).unsqueeze(-1) * block_out)
    return out, new_lse


def exchange(kv, rank, world):
    """Send this block to the next rank, receive the previous rank's. With every rank
    posting its isend first, gloo timed out here; so even ranks send first and odd
    ranks receive first, and the ring needs an even number of ranks."""
    incoming = paddle.empty_like(kv)
    if rank % 2 == 0:
        tasks = [dist.isend(kv, (rank + 1) % world),
                 dist.irecv(incoming, (rank - 1) % world)]
    else:
        tasks = [dist.irecv(incoming, (rank - 1) % world),
                 dist.isend(kv, (rank + 1) % world)]
    return incoming, tasks


SENT: list = []     # bytes of each block this rank sent in its last ring


def ring_attention(q_chunks, kv, layout, causal, rank, world):
    """One rank's share of attention. q_chunks: its query chunks; kv: its keys and
    values stacked, [2, heads, 2c, d], its two chunks side by side. Returns the outputs
    of its query chunks, and what it computed (chunk pairs, and seconds of CPU time)."""
    my_chunks = chunks_of(rank, world, layout)
    c = q_chunks[0].shape[1]
    results = [(None, None) for _ in q_chunks]
    pairs, busy = 0, 0.0
    SENT.clear()
    for step in range(world):
        holder = (rank - step) % world          # whose chunks the block came from
        kv_chunks = chunks_of(holder, world, layout)
        k, v = kv[0], kv[1]
        if step < world - 1:                    # pass the block on
            incoming, tasks = exchange(kv, rank, world)
            SENT.append(kv.numel().item() * kv.element_size())
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
            for task in tasks:
                task.wait()
            kv = incoming
    return [out for out, _ in results], pairs, busy


def full_attention(q, k, v, causal):
    """The one-process reference: softmax over the whole sequence, [heads, SEQ, d]."""
    scores = paddle.matmul(q, k, transpose_y=True) / math.sqrt(HEAD_DIM)
    if causal:
        future = paddle.triu(paddle.ones([SEQ, SEQ], dtype="bool"), 1)
        scores = paddle.masked_fill(scores, future, float("-inf"))
    return paddle.matmul(paddle.nn.functional.softmax(scores, -1), v)


def try_ring_flash_attention(q, k, v, world):
    """Paddle's own ring attention (auto-parallel's `RingFlashAttention`, the zig-zag
    split, flash-attention kernels per block) on a mesh whose dimension is "sep"."""
    from paddle.distributed.auto_parallel.ring_attention import (
        RingFlashAttention, shard_seq_load_balance, unshard_seq_load_balance)

    mesh = dist.ProcessMesh(list(range(world)), dim_names=["sep"])
    dist.auto_parallel.set_mesh(mesh)
    # flash attention's layout: [batch, seq, heads, head_dim]
    q, k, v = (t.transpose([1, 0, 2]).unsqueeze(0) for t in (q, k, v))
    try:
        q, k, v = (shard_seq_load_balance(dist.shard_tensor(t, mesh, [dist.Replicate()]),
                                          1) for t in (q, k, v))
        out = RingFlashAttention.apply(q, k, v, is_causal=True)
        whole = unshard_seq_load_balance(out, 1)
        want = full_attention(*(t.transpose([0, 2, 1, 3])[0] for t in (q, k, v)), True)
        diff = float((whole[0].transpose([1, 0, 2]) - want).abs().max())
        return f"ran: largest difference from full attention {diff:.1e}", diff
    except Exception as err:    # shown on the page as Paddle printed it
        return f"{type(err).__name__}: {str(err).strip().splitlines()[0]}", None


def experiment(device: str = "cpu", out_file: str | None = None) -> None:
    """The three configurations and Paddle's RingFlashAttention, on the parallel
    environment already started; rank 0 prints a line for each and writes `out_file`."""
    rank, world = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(0)              # the same q, k, v on every rank
    q, k, v = paddle.to_tensor(rng.standard_normal((3, HEADS, SEQ, HEAD_DIM),
                                                   dtype=np.float32)).unbind(0)
    c = SEQ // (2 * world)
    chunk = lambda t, i: t[:, i * c:(i + 1) * c]
    runs = []
    for layout, causal in (("contiguous", False), ("contiguous", True),
                           ("zigzag", True)):
        mine = chunks_of(rank, world, layout)
        q_chunks = [chunk(q, i) for i in mine]
        kv = paddle.stack([paddle.concat([chunk(k, i) for i in mine], 1),
                           paddle.concat([chunk(v, i) for i in mine], 1)])
        walls, busies = [], []
        for repeat in range(REPEATS + 1):          # the first is a warm-up
            dist.barrier()
            start = time.perf_counter()
            outs, pairs, busy = ring_attention(q_chunks, kv, layout, causal, rank, world)
            if repeat:
                walls.append(time.perf_counter() - start)
                busies.append(busy)
        want = full_attention(q, k, v, causal)
        diff = max(float((o - chunk(want, i)).abs().max()) for o, i in zip(outs, mine))
        mine_stats = {"rank": rank, "chunks": mine, "pairs": pairs, "busy_s": busies,
                      "wall_s": walls, "max_diff": diff, "sent_bytes": sum(SENT)}
        every = []
        dist.all_gather_object(every, mine_stats)
        runs.append({"layout": layout, "causal": causal, "ranks": every})
        if rank == 0:
            worst = max(r["max_diff"] for r in every)
            print(f"{layout:>10}, {'causal' if causal else 'no mask'}: chunk pairs "
                  f"per rank {[r['pairs'] for r in every]},\n    largest difference from "
                  f"full attention {worst:.1e}")
    ring, ring_diff = try_ring_flash_attention(q, k, v, world)
    if rank == 0:
        print(f"RingFlashAttention on {device}: {ring}")
    if rank == 0 and out_file:
        os.makedirs(os.path.dirname(out_file) or ".", exist_ok=True)
        with open(out_file, "w") as f:
            json.dump({"framework": "Paddle", "world": world, "seq": SEQ,
                       "heads": HEADS, "head_dim": HEAD_DIM, "chunk": c,
                       "runs": runs, "ring_flash_attention": ring,
                       "ring_flash_attention_diff": ring_diff}, f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None, help="JSON file rank 0 writes")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    paddle.set_device(args.device)
    dist.init_parallel_env()
    experiment(args.device, args.out)


if __name__ == "__main__":
    main()
