"""Expert parallelism by hand: a mixture-of-experts layer over torch.distributed ranks.

EXPERTS copies of TinyGPT's MLP (width 64, hidden 256) and a router that sends each
token to its TOP_K best experts, their gates renormalised to sum to 1 (GShard, Lepikhin
et al. 2021; Switch, Fedus et al. 2022). Each rank holds EXPERTS / N of the experts and
its own share of the tokens. An expert takes at most `capacity` tokens from each rank,

    capacity = ceil(capacity_factor * tokens_per_rank * TOP_K / EXPERTS),

first choices before second ones, earlier tokens first; the rest are dropped (that
expert adds nothing to them). The tokens go to their experts' ranks in one
`all_to_all_single` (every expert gets `capacity` slots from every rank, zeros where
nothing was routed) and come back in another; the backward pass runs the same two in
reverse. The output and every gradient are compared with one process that runs the
same layer on the same tokens, with the same routing, without communication.

    torchrun --standalone --nproc_per_node 2 moe_torch.py --out moe.json
"""
import argparse
import json
import math
import os

import torch
import torch.distributed as dist
from torch import nn

from tinygpt_torch import TinyGPT, WIDTH, batch

EXPERTS, TOP_K = 4, 2
CAPACITY_FACTORS = (0.5, 1.0, 1.5)


class AllToAll(torch.autograd.Function):
    """Rows go to ranks in equal parts, in rank order; the backward pass sends each
    gradient back where its row came from, which is the same exchange again."""

    @staticmethod
    def forward(ctx, x):
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x.contiguous())
        COUNT.append(("all_to_all_single", x.numel() * x.element_size()))
        return out

    @staticmethod
    def backward(ctx, grad):
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad.contiguous())
        COUNT.append(("all_to_all_single", grad.numel() * grad.element_size()))
        return out


COUNT: list = []     # the collectives this rank ran: (name, bytes it sent and received)


def make_layer():
    """The router and all experts, with the same weights in every process."""
    torch.manual_seed(1)
    router = nn.Linear(WIDTH, EXPERTS, bias=False)
    experts = nn.ModuleList(nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(),
                                          nn.Linear(4 * WIDTH, WIDTH))
                            for _ in range(EXPERTS))
    return router, experts


def route(x, router, capacity):
    """Top-k routing with a capacity. Returns, for each kept (token, choice), the token,
    its slot in the (EXPERTS * capacity) dispatch buffer and its gate; and the number of
    assignments each expert was sent and kept."""
    probs = router(x).softmax(-1)                                  # (tokens, experts)
    gate, expert = probs.topk(TOP_K, dim=-1)                       # (tokens, k)
    gate = gate / gate.sum(-1, keepdim=True)
    # choice-major order: every token's first choice before any second choice
    expert_cm = expert.t().reshape(-1)                             # (k * tokens,)
    onehot = nn.functional.one_hot(expert_cm, EXPERTS)
    position = ((onehot.cumsum(0) - 1) * onehot).sum(-1)          # place in its expert
    kept = position < capacity
    token = torch.arange(x.shape[0], device=x.device).repeat(TOP_K)
    slot = expert_cm * capacity + position
    sent = torch.bincount(expert_cm, minlength=EXPERTS)
    held = torch.bincount(expert_cm[kept], minlength=EXPERTS)
    return (token[kept], slot[kept], gate.t().reshape(-1)[kept]), sent, held


def dispatch(x, token, slot, capacity):
    """(tokens, width) -> (EXPERTS * capacity, width): each kept token in its slot."""
    buffer = x.new_zeros(EXPERTS * capacity, x.shape[1])
    return buffer.index_copy(0, slot, x[token])


def combine(y, token, slot, gate, tokens):
    """(EXPERTS * capacity, width) -> (tokens, width): each token's experts' outputs,
    weighted by their gates; a dropped assignment adds nothing."""
    out = y.new_zeros(tokens, y.shape[1])
    return out.index_add(0, token, y[slot] * gate.unsqueeze(-1))


def moe_parallel(x, router, experts, mine, capacity, world):
    """This rank's tokens through the experts of all ranks; `mine` are its experts."""
    (token, slot, gate), sent, held = route(x, router, capacity)
    local = len(mine)
    buffer = dispatch(x, token, slot, capacity)     # experts in rank order: equal parts
    got = AllToAll.apply(buffer).view(world, local, capacity, -1)  # (src, expert, c, w)
    y = torch.stack([expert(got[:, e].reshape(world * capacity, -1))
                     for e, expert in enumerate(mine)], 1)         # (src * c, local, w)
    y = y.view(world, capacity, local, -1).transpose(1, 2).reshape(-1, x.shape[1])
    back = AllToAll.apply(y)                                       # (EXPERTS * c, w)
    return combine(back, token, slot, gate, x.shape[0]), sent, held


def moe_reference(x, router, experts, capacity):
    """One process, no communication: the same routing, every expert here."""
    (token, slot, gate), sent, held = route(x, router, capacity)
    buffer = dispatch(x, token, slot, capacity).view(EXPERTS, capacity, -1)
    y = torch.cat([expert(buffer[e]) for e, expert in enumerate(experts)])
    return combine(y, token, slot, gate, x.shape[0]), sent, held


def experiment(device: str = "cpu", out_file: str | None = None) -> None:
    """The layer at each capacity factor against one process, on the process group
    already started; rank 0 prints a line for each and writes `out_file` (JSON)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu" if device == "cpu"
                          else f"cuda:{os.environ['LOCAL_RANK']}")
    torch.set_default_device(device)   # every tensor and layer below on this device
    local = EXPERTS // world                        # experts per rank
    with torch.no_grad():     # the MoE layer's input: TinyGPT's embedded first batch
        tokens = TinyGPT().embed(batch(0)[0].to(device)).reshape(-1, WIDTH)  # (512, 64)
    torch.manual_seed(2)
    target = torch.randn_like(tokens)               # the loss: sum of out * target
    per_rank = tokens.shape[0] // world
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    runs = []
    for factor in CAPACITY_FACTORS:
        capacity = math.ceil(factor * per_rank * TOP_K / EXPERTS)
        router, experts = make_layer()
        mine = experts[rank * local:(rank + 1) * local]
        x = tokens[rows].clone().requires_grad_()
        COUNT.clear()
        out, sent, held = moe_parallel(x, router, experts, mine, capacity, world)
        (out * target[rows]).sum().backward()
        dist.all_reduce(router.weight.grad)         # the router is replicated
        # the reference: every rank's tokens, routed per rank as above, in one process
        ref_router, ref_experts = make_layer()
        xs = tokens.clone().requires_grad_()
        ref = [moe_reference(xs[r * per_rank:(r + 1) * per_rank], ref_router,
                             ref_experts, capacity) for r in range(world)]
        ref_out = torch.cat([o for o, _, _ in ref])
        (ref_out * target).sum().backward()
        grads = [(p.grad - q.grad).abs().max().item() for e in range(local)
                 for p, q in zip(mine[e].parameters(),
                                 ref_experts[rank * local + e].parameters())]
        stats = {"rank": rank, "sent": sent.tolist(), "kept": held.tolist(),
                 "out_diff": (out - ref_out[rows]).abs().max().item(),
                 "x_grad_diff": (x.grad - xs.grad[rows]).abs().max().item(),
                 "expert_grad_diff": max(grads),
                 "router_grad_diff": (router.weight.grad
                                      - ref_router.weight.grad).abs().max().item(),
                 "collectives": list(COUNT)}
        every = [None] * world
        dist.all_gather_object(every, stats)
        runs.append({"capacity_factor": factor, "capacity": capacity, "ranks": every})
        if rank == 0:
            sent_all = [sum(r["sent"][e] for r in every) for e in range(EXPERTS)]
            kept_all = [sum(r["kept"][e] for r in every) for e in range(EXPERTS)]
            diff = max(max(r[k] for k in r if k.endswith("_diff")) for r in every)
            print(f"capacity factor {factor}: {capacity} slots per expert and rank;\n"
                  f"    sent to each expert {sent_all}, kept {kept_all}, dropped "
                  f"{sum(sent_all) - sum(kept_all)};\n    largest difference from one "
                  f"process (output and gradients) {diff:.1e}")
    if rank == 0 and out_file:
        os.makedirs(os.path.dirname(out_file) or ".", exist_ok=True)
        with open(out_file, "w") as f:
            json.dump({"framework": "PyTorch", "world": world, "experts": EXPERTS,
                       "top_k": TOP_K, "tokens_per_rank": per_rank, "width": WIDTH,
                       "runs": runs}, f)


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
