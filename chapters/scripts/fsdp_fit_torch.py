"""FSDP2 with the fitting chapter's two knobs, on 2 or more ranks: every block sharded
with `fully_shard(..., mp_policy=MixedPrecisionPolicy(...))` (BF16 parameters for the
computation, FP32 shards and FP32 gradient reduction) and recomputed in the backward
pass (`checkpoint` per block), against the same model trained plainly in one process.

    torchrun --standalone --nproc_per_node 2 fsdp_fit_torch.py [--device cuda]
"""
import argparse
import contextlib
import math
import os
import warnings

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import fitting_torch as ft
from tinygpt_torch import BATCH

STEPS = 3
# FSDP2 warns that a unit returned a view (the head's logits, which loss_fn flattens):
# an in-place change of it would skip a hook; nothing here changes it in place.
warnings.filterwarnings("ignore", message="FSDP2-wrapped module")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device(args.device, rank if args.device == "cuda" else None) \
        if args.device == "cuda" else torch.device("cpu")
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    model = ft.build().to(device)
    counter = ft.SavedTensors(model)            # (before its parameters become shards)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16,    # gathered, computed
                                  reduce_dtype=torch.float32)    # gradients summed
    # each unit that `ft.forward` calls is sharded on its own (it calls them in turn,
    # not the model's own forward, so the model itself is no unit)
    for unit in [model.embed, *model.blocks.values(), model.norm, model.head]:
        fully_shard(unit, mp_policy=policy)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rows = BATCH // world                       # this rank's share of each batch
    losses = []
    for step in range(STEPS):
        x, y = (t[rank * rows:(rank + 1) * rows].to(device) for t in ft.batch(step))
        last = step == STEPS - 1                # the step whose saved tensors count
        with counter.hooks() if last else contextlib.nullcontext():
            loss = ft.loss_fn(ft.forward(model, x, "full"), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    shard = model.blocks["0"].qkv.weight
    saved_dtypes = sorted({d for *_, d, _ in counter.shapes})
    # the same steps in one process, FP32, no recomputation
    _, plain = ft.train(STEPS)
    if rank == 0:
        print(f"{world} ranks: each block's parameters are {type(shard).__name__} shards "
              f"of {shard.to_local().dtype}\n  ({shard.to_local().numel():,} of "
              f"{shard.numel():,} values of the q/k/v weight); gradients reduced in "
              f"{policy.reduce_dtype}")
        print(f"saved for backward on rank 0 in the last step: "
              f"{sum(counter.layers().values()):,} bytes,\n  dtypes {saved_dtypes}")
        for s, (a, b) in enumerate(zip(losses, plain)):
            print(f"step {s}: loss {a:.4f} (one process, FP32: {b:.4f})")
        worst = max(abs(a - b) for a, b in zip(losses, plain))
        # the gap between neighbouring BF16 numbers at the loss's size
        spacing = torch.finfo(torch.bfloat16).eps * 2 ** math.floor(math.log2(plain[0]))
        print(f"largest difference {worst:.4f}; BF16 numbers near {plain[0]:.1f} are "
              f"{spacing:.4f} apart")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
