"""A two-layer MLP split over the ranks, Megatron-style (first layer by columns, second
by rows), trained next to an unsplit copy of itself: both must give the same weights.

    torchrun --nproc_per_node 2 tp_mlp_torch.py                # CPU ranks, gloo
    torchrun --nproc_per_node gpu tp_mlp_torch.py --device cuda  # every GPU, NCCL
"""
import argparse
import copy
import json
import os
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

# CommDebugMode's module tracker warns when a module's input needs no gradient
warnings.filterwarnings("ignore", message="Full backward hook")

DIMS, BATCH, STEPS, LR = (64, 128, 32), 32, 5, 0.1


def mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)   # the same initial weights on every rank
    return torch.nn.Sequential(torch.nn.Linear(DIMS[0], DIMS[1], bias=False),
                               torch.nn.ReLU(),
                               torch.nn.Linear(DIMS[1], DIMS[2], bias=False))


def counted(phase: dict, name: str, comm: CommDebugMode) -> None:
    phase[name] = {str(op).split(".")[-1]: n
                   for op, n in comm.get_comm_counts().items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh(args.device, (int(os.environ["WORLD_SIZE"]),))

    reference = mlp().to(args.device)          # the unsplit model, trained on this rank
    # nn.Linear keeps its weight as (out, in): ColwiseParallel splits the output
    # features (Shard(0) of the weight), RowwiseParallel the input features (Shard(1))
    model = parallelize_module(copy.deepcopy(reference), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    gen = torch.Generator().manual_seed(1)     # the same batch on every rank
    x = torch.randn(BATCH, DIMS[0], generator=gen).to(args.device)
    t = torch.randn(BATCH, DIMS[2], generator=gen).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)

    losses, ref_losses, phases = [], [], {}
    for _ in range(STEPS):
        with CommDebugMode() as comm:
            loss = torch.nn.functional.mse_loss(model(x), t)
        counted(phases, "forward", comm)
        with CommDebugMode() as comm:
            opt.zero_grad()
            loss.backward()
        counted(phases, "backward", comm)
        with CommDebugMode() as comm:
            opt.step()
        counted(phases, "optimizer step", comm)
        ref_loss = torch.nn.functional.mse_loss(reference(x), t)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        losses.append(loss.item())
        ref_losses.append(ref_loss.item())

    linears = [model[0], model[2]]
    full = [m.weight.full_tensor() for m in linears]    # gathers each weight's shards
    weight_diff = max((w - r.weight).abs().max().item()
                      for w, r in zip(full, [reference[0], reference[2]]))
    loss_diff = max(abs(a - b) for a, b in zip(losses, ref_losses))
    if dist.get_rank() == 0:
        print(f"MLP {DIMS}, batch {BATCH}, {STEPS} SGD steps, float32, "
              f"{mesh.size()} ranks on {args.device}")
        for name, m in zip(("first (column-wise)", "second (row-wise)"), linears):
            print(f"  {name} layer: weight {tuple(m.weight.shape)} is "
                  f"{m.weight.placements}, rank 0 holds "
                  f"{tuple(m.weight.to_local().shape)}")
        print("  losses, split  :", [round(v, 6) for v in losses])
        print("  losses, unsplit:", [round(v, 6) for v in ref_losses])
        print(f"  largest difference: loss {loss_diff:.1e}, weight {weight_diff:.1e}")
        print("  collectives in one step (CommDebugMode):", phases)
        if args.out:
            with open(args.out, "w") as f:
                shapes = [list(m.weight.to_local().shape) for m in linears]
                json.dump({"world": mesh.size(), "losses": losses,
                           "ref_losses": ref_losses, "loss_diff": loss_diff,
                           "weight_diff": weight_diff, "local_shapes": shapes,
                           "collectives": phases}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
