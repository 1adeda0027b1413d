"""Expert parallelism by hand: a mixture-of-experts layer over paddle.distributed ranks.

EXPERTS copies of TinyGPT's MLP (width 64, hidden 256) and a router that sends each
token to its TOP_K best experts, their gates renormalised to sum to 1 (GShard, Lepikhin
et al. 2021; Switch, Fedus et al. 2022). Each rank holds EXPERTS / N of the experts and
its own share of the tokens. An expert takes at most `capacity` tokens from each rank,

    capacity = ceil(capacity_factor * tokens_per_rank * TOP_K / EXPERTS),

first choices before second ones, earlier tokens first; the rest are dropped (that
expert adds nothing to them). The tokens go to their experts' ranks in one all-to-all
(every expert gets `capacity` slots from every rank, zeros where nothing was routed)
and come back in another; the backward pass runs the same two in reverse.

`paddle.distributed.alltoall` is the call for it. The script tries it first; where the
process group cannot run it (gloo on CPU), each rank gathers every rank's buffer with
`all_gather` and keeps its own blocks: the same result, for `world` times the bytes.
(Written with `isend` / `irecv` one pair of ranks at a time, the exchange timed out on
4 gloo ranks here; the ring of ring_attention_paddle.py, neighbours only, runs.) The output and every gradient are
compared with one process that runs the same layer on the same tokens, with the same
routing, without communication.

    python -m paddle.distributed.launch --nproc_per_node 2 moe_paddle.py
"""
import argparse
import json
import math
import os
import textwrap

import numpy as np
import paddle
import paddle.distributed as dist
from paddle import nn
from paddle.autograd import PyLayer

from tinygpt_paddle import TinyGPT, WIDTH, batch

EXPERTS, TOP_K = 4, 2
CAPACITY_FACTORS = (0.5, 1.0, 1.5)
COUNT: list = []     # the exchanges this rank ran: (name, bytes it sent and received)
USE_ALLTOALL = True  # cleared when the process group cannot run dist.alltoall


def all_to_all(x):
    """Row block j of x goes to rank j; block i of the result came from rank i."""
    world, rank = dist.get_world_size(), dist.get_rank()
    parts = list(paddle.split(x, world))
    if USE_ALLTOALL:
        COUNT.append(("alltoall", x.numel().item() * x.element_size()))
        got = []
        dist.alltoall(got, parts)
        return paddle.concat(got)
    # what gloo runs: every rank gathers every rank's whole buffer and keeps the block
    # meant for it, receiving `world` times the bytes of an all-to-all
    COUNT.append(("all_gather", x.numel().item() * x.element_size()))
    every = []
    dist.all_gather(every, x)
    return paddle.concat([list(paddle.split(b, world))[rank] for b in every])


class AllToAll(PyLayer):
    """The backward pass sends each gradient back where its row came from: the same
    exchange again."""

    @staticmethod
    def forward(ctx, x):
        return all_to_all(x)

    @staticmethod
    def backward(ctx, grad):
        return all_to_all(grad)


def make_layer():
    """The router and all experts, with the same weights in every process."""
    paddle.seed(1)
    router = nn.Linear(WIDTH, EXPERTS, bias_attr=False)
    experts = nn.LayerList([nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(),
                                          nn.Linear(4 * WIDTH, WIDTH))
                            for _ in range(EXPERTS)])
    return router, experts


def route(x, router, capacity):
    """Top-k routing with a capacity. Returns, for each kept (token, choice), the token,
    its slot in the (EXPERTS * capacity) dispatch buffer and its gate; and the number of
    assignments each expert was sent and kept."""
    probs = nn.functional.softmax(router(x), -1)                   # [tokens, experts]
    gate, expert = paddle.topk(probs, TOP_K, axis=-1)              # [tokens, k]
    gate = gate / gate.sum(-1, keepdim=True)
    # choice-major order: every token's first choice before any second choice
    expert_cm = expert.t().reshape([-1])                           # [k * tokens]
    onehot = nn.functional.one_hot(expert_cm, EXPERTS).astype("int64")
    position = ((onehot.cumsum(0) - 1) * onehot).sum(-1)          # place in its expert
    kept = paddle.nonzero(position < capacity).flatten()
    token = paddle.arange(x.shape[0]).tile([TOP_K])
    slot = expert_cm * capacity + position
    sent = paddle.bincount(expert_cm, minlength=EXPERTS)
    held = paddle.bincount(expert_cm[kept], minlength=EXPERTS)
    return (token[kept], slot[kept], gate.t().reshape([-1])[kept]), sent, held


def dispatch(x, token, slot, capacity):
    """[tokens, width] -> [EXPERTS * capacity, width]: each kept token in its slot."""
    buffer = paddle.zeros([EXPERTS * capacity, x.shape[1]])
    return paddle.scatter(buffer, slot, x[token])      # slots are distinct: overwrite


def combine(y, token, slot, gate, tokens):
    """[EXPERTS * capacity, width] -> [tokens, width]: each token's experts' outputs,
    weighted by their gates; a dropped assignment adds nothing."""
    out = paddle.zeros([tokens, y.shape[1]])
    return paddle.index_add(out, token, 0, y[slot] * gate.unsqueeze(-1))


def moe_parallel(x, router, experts, mine, capacity, world):
    """This rank's tokens through the experts of all ranks; `mine` are its experts."""
    (token, slot, gate), sent, held = route(x, router, capacity)
    local = len(mine)
    buffer = dispatch(x, token, slot, capacity)     # experts in rank order: equal parts
    got = AllToAll.apply(buffer).reshape([world, local, capacity, -1])
    y = paddle.stack([expert(got[:, e].reshape([world * capacity, -1]))
                      for e, expert in enumerate(mine)], 1)        # [src*c, local, w]
    y = y.reshape([world, capacity, local, -1]).transpose([0, 2, 1, 3])
    back = AllToAll.apply(y.reshape([-1, x.shape[1]]))             # [EXPERTS * c, w]
    return combine(back, token, slot, gate, x.shape[0]), sent, held


def moe_reference(x, router, experts, capacity):
    """One process, no communication: the same routing, every expert here."""
    (token, slot, gate), sent, held = route(x, router, capacity)
    buffer = dispatch(x, token, slot, capacity).reshape([EXPERTS, capacity, -1])
    y = paddle.concat([expert(buffer[e]) for e, expert in enumerate(experts)])
    return combine(y, token, slot, gate, x.shape[0]), sent, held


def try_alltoall(world):
    """Does this process group run dist.alltoall? The error, as Paddle printed it."""
    global USE_ALLTOALL
    got = []
    try:
        dist.alltoall(got, [paddle.ones([1]) for _ in range(world)])
        return "ran"
    except Exception as err:
        USE_ALLTOALL = False
        return f"{type(err).__name__}: {str(err).strip().splitlines()[0]}"


def experiment(device: str = "cpu", out_file: str | None = None) -> None:
    """dist.alltoall tried, then the layer at each capacity factor against one process,
    on the parallel environment already started; rank 0 prints a line for each and
    writes `out_file` (JSON)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    local = EXPERTS // world                        # experts per rank
    alltoall = try_alltoall(world)
    if rank == 0:
        print(textwrap.fill(f"dist.alltoall on {device}: {alltoall}", 88,
                            subsequent_indent="    "))
    with paddle.no_grad():    # the MoE layer's input: TinyGPT's embedded first batch
        tokens = TinyGPT().embed(batch(0)[0]).reshape([-1, WIDTH])  # [512, 64]
    target = paddle.to_tensor(np.random.default_rng(2).standard_normal(
        tokens.shape, dtype=np.float32))            # the loss: sum of out * target
    per_rank = tokens.shape[0] // world
    lo, hi = rank * per_rank, (rank + 1) * per_rank
    runs = []
    for factor in CAPACITY_FACTORS:
        capacity = math.ceil(factor * per_rank * TOP_K / EXPERTS)
        router, experts = make_layer()
        mine = experts[rank * local:(rank + 1) * local]
        x = tokens[lo:hi].clone()
        x.stop_gradient = False
        COUNT.clear()
        out, sent, held = moe_parallel(x, router, experts, mine, capacity, world)
        (out * target[lo:hi]).sum().backward()
        dist.all_reduce(router.weight.grad)         # the router is replicated
        # the reference: every rank's tokens, routed per rank as above, in one process
        ref_router, ref_experts = make_layer()
        xs = tokens.clone()
        xs.stop_gradient = False
        ref = [moe_reference(xs[r * per_rank:(r + 1) * per_rank], ref_router,
                             ref_experts, capacity) for r in range(world)]
        ref_out = paddle.concat([o for o, _, _ in ref])
        (ref_out * target).sum().backward()
        diff = lambda a, b: float((a - b).abs().max())
        grads = [diff(p.grad, q.grad) for e in range(local)
                 for p, q in zip(mine[e].parameters(),
                                 ref_experts[rank * local + e].parameters())]
        stats = {"rank": rank, "sent": sent.tolist(), "kept": held.tolist(),
                 "out_diff": diff(out, ref_out[lo:hi]),
                 "x_grad_diff": diff(x.grad, xs.grad[lo:hi]),
                 "expert_grad_diff": max(grads),
                 "router_grad_diff": diff(router.weight.grad, ref_router.weight.grad),
                 "collectives": list(COUNT)}
        every = []
        dist.all_gather_object(every, stats)
        runs.append({"capacity_factor": factor, "capacity": capacity, "ranks": every})
        if rank == 0:
            sent_all = [sum(r["sent"][e] for r in every) for e in range(EXPERTS)]
            kept_all = [sum(r["kept"][e] for r in every) for e in range(EXPERTS)]
            worst = max(max(r[k] for k in r if k.endswith("_diff")) for r in every)
            print(f"capacity factor {factor}: {capacity} slots per expert and rank;\n"
                  f"    sent to each expert {sent_all}, kept {kept_all}, dropped "
                  f"{sum(sent_all) - sum(kept_all)};\n    largest difference from one "
                  f"process (output and gradients) {worst:.1e}")
    if rank == 0 and out_file:
        os.makedirs(os.path.dirname(out_file) or ".", exist_ok=True)
        with open(out_file, "w") as f:
            json.dump({"framework": "Paddle", "world": world, "experts": EXPERTS,
                       "top_k": TOP_K, "tokens_per_rank": per_rank, "width": WIDTH,
                       "alltoall": alltoall, "runs": runs}, f)


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
