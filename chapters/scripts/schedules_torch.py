"""TinyGPT on 2 pipeline ranks with torch.distributed.pipelining's schedules: GPipe and
1F1B (one stage per rank), interleaved 1F1B and two zero-bubble schedules (two virtual
stages per rank, one block each). Every stage records when it computes, on the clock
all processes of this machine share, and how many bytes each micro-batch's forward
saves for its backward.

    torchrun --nproc_per_node 2 schedules_torch.py --out sched.json   # CPU ranks, gloo
    torchrun --nproc_per_node 2 schedules_torch.py --device cuda      # two GPUs

Every schedule trains next to a whole copy of the model; their weights must agree.
"""
import argparse
import json
import os
import textwrap
import time
import traceback

import torch
import torch.distributed as dist
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                          ScheduleInterleaved1F1B,
                                          ScheduleInterleavedZeroBubble,
                                          ScheduleZBVZeroBubble)

from tinygpt_torch import BATCH, BLOCKS, TinyGPT, batch, loss_fn

STEPS, LR = 3, 3e-3          # step 0 warms up; 1-2 are timed


def looped(rank: int, ranks: int, virtual: int) -> list[int]:
    """Stage numbers of this rank when stage s sits on rank s % ranks (Megatron's
    interleaving): rank 0 of 2 holds stages 0 and 2."""
    return [rank + ranks * v for v in range(virtual)]


def v_shape(rank: int, ranks: int, virtual: int) -> list[int]:
    """The V of ZBV: down the ranks and back up, so rank 0 holds the first and the last
    stage (of 4 on 2 ranks: rank 0 holds 0 and 3, rank 1 holds 1 and 2)."""
    return [rank, 2 * ranks - 1 - rank]


# name: (schedule class, virtual stages per rank, which stages a rank holds)
SCHEDULES = {"GPipe": (ScheduleGPipe, 1, looped),
             "1F1B": (Schedule1F1B, 1, looped),
             "Interleaved 1F1B": (ScheduleInterleaved1F1B, 2, looped),
             "Interleaved zero bubble": (ScheduleInterleavedZeroBubble, 2, looped),
             "ZBV zero bubble": (ScheduleZBVZeroBubble, 2, v_shape)}


def timed(stage: PipelineStage, events: list, saved: dict) -> None:
    """Record each pass the stage computes: F (forward), B (backward: the whole of it,
    or in the zero-bubble schedules only the gradient of the stage's input) and W (the
    weights' gradient, which zero-bubble schedules run later). The forward also counts
    the bytes of the activations autograd keeps for backward (the weights excluded)."""
    weights = {p.untyped_storage().data_ptr() for p in stage.submod.parameters()}
    s = stage.stage_index

    def forward(chunk, *args, **kwargs):
        held = {}

        def pack(t):           # every tensor saved for backward passes through here
            ptr = t.untyped_storage().data_ptr()
            if ptr not in weights:
                held[ptr] = t.untyped_storage().nbytes()
            return t

        start = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = type(stage).forward_one_chunk(stage, chunk, *args, **kwargs)
        events.append(("F", s, chunk, start, time.perf_counter()))
        saved[s] = sum(held.values())
        return out

    def backward(chunk, *args, **kwargs):
        start = time.perf_counter()
        out = type(stage).backward_one_chunk(stage, chunk, *args, **kwargs)
        events.append(("B", s, chunk, start, time.perf_counter()))
        return out

    def weight(chunk, *args, **kwargs):
        start = time.perf_counter()
        out = type(stage).backward_weight_one_chunk(stage, chunk, *args, **kwargs)
        events.append(("W", s, chunk, start, time.perf_counter()))
        return out

    stage.forward_one_chunk = forward
    stage.backward_one_chunk = backward
    stage.backward_weight_one_chunk = weight


def train(name: str, micro: int, rank: int, ranks: int, device) -> dict:
    kind, virtual, place = SCHEDULES[name]
    numbers = place(rank, ranks, virtual)
    count = ranks * virtual                       # stages in all
    per_stage = BLOCKS // count
    parts = [TinyGPT(blocks=range(s * per_stage, (s + 1) * per_stage)).to(device)
             for s in numbers]
    stages = [PipelineStage(part, s, count, device) for part, s in zip(parts, numbers)]
    # the loss of each micro-batch is its mean; the schedule divides the summed
    # gradients by the number of micro-batches, so a step sees the whole batch's mean
    pipe = kind(stages if virtual > 1 else stages[0], n_microbatches=micro,
                loss_fn=loss_fn)
    params = [p for part in parts for p in part.parameters()]
    opt = torch.optim.Adam(params, lr=LR)
    losses, steps, times, saved = [], [], [], {}
    for step in range(STEPS):
        x, y = (t.to(device) for t in batch(step))
        events = []
        for stage in stages:
            timed(stage, events, saved)           # this step's timeline
        dist.barrier()
        start = time.perf_counter()
        inputs = {"target": y, "losses": []} if count - 1 in numbers else {}
        pipe.step(*([x] if 0 in numbers else []), **inputs)   # first stage: tokens
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - start)
        steps.append(events)
        if inputs:                                # the last stage: the losses
            losses.append(sum(v.item() for v in inputs["losses"]) / micro)
    state = {k: v for part in parts for k, v in part.state_dict().items()}
    return {"schedule": name, "micro": micro, "virtual": virtual, "stages": numbers,
            "steps": steps[1:], "times": times[1:], "losses": losses,
            "saved_bytes": saved, "state": state}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--micro", default="4,8", help="micro-batches per step to try")
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()

    whole = TinyGPT().to(device)              # the reference: one process, whole model
    opt = torch.optim.Adam(whole.parameters(), lr=LR)
    ref_losses = []
    for step in range(STEPS):
        x, y = (t.to(device) for t in batch(step))
        loss = loss_fn(whole(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_losses.append(loss.item())
    reference = whole.state_dict()

    runs, failed = [], {}
    for micro in (int(m) for m in args.micro.split(",")):
        for name in args.schedules.split(","):
            try:
                run = train(name, micro, rank, ranks, device)
            except Exception as e:                # what PyTorch says, as it says it
                failed[name] = f"{type(e).__name__}: {e}".strip()
                where = traceback.extract_tb(e.__traceback__)[-1]
                failed[name] += f"\n    raised in {where.name} ({where.filename})"
                continue
            state = run.pop("state")              # the whole model's names, in part
            run["weight_diff"] = max((w - reference[k]).abs().max().item()
                                     for k, w in state.items())
            everyone = [None] * ranks
            dist.all_gather_object(everyone, run)
            runs.append(everyone)
    if rank == 0:
        print(f"TinyGPT on {ranks} pipeline ranks on {device.type}, {BATCH} sequences "
              f"a step, {STEPS} Adam steps;\nthe last step's passes per rank, in order\n"
              "(F forward, B backward, W weight gradient; stage.micro-batch):")
        for everyone in runs:
            head = f"{everyone[0]['schedule']}, {everyone[0]['micro']} micro-batches"
            print(head)
            for r, run in enumerate(everyone):
                order = " ".join(f"{k}{s}.{c}" for k, s, c, _, _ in run["steps"][-1])
                # wrapped to the page's width: a long order was 265 characters
                print(textwrap.fill(f"  rank {r} (stages {run['stages']}): {order}", 96,
                                    subsequent_indent="      "))
            diff = max(r["weight_diff"] for r in everyone)
            losses = next(r["losses"] for r in everyone if r["losses"])
            loss_diff = max(abs(a - b) for a, b in zip(losses, ref_losses))
            print(f"  largest difference from the whole model: weights {diff:.1e}, "
                  f"loss {loss_diff:.1e}")
        for name, error in failed.items():
            print(f"{name} did not run: {error}")
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                json.dump({"framework": "PyTorch", "ranks": ranks,
                           "device": device.type, "batch": BATCH, "runs": runs,
                           "failed": failed, "ref_losses": ref_losses}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
