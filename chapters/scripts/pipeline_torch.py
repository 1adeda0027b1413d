"""TinyGPT in two pipeline stages with torch.distributed.pipelining: GPipe and 1F1B
schedules, each step's batch cut into micro-batches; every stage records when it
computes, on the clock all processes of this machine share.

    torchrun --nproc_per_node 2 pipeline_torch.py --out pipe.json   # CPU ranks, gloo
    torchrun --nproc_per_node 2 pipeline_torch.py --device cuda     # two GPUs

Rank 0 holds the embedding and the first half of the blocks, rank 1 the rest and the
head. Both train next to a whole copy of the model; their weights must agree.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from tinygpt_torch import BATCH, BLOCKS, TinyGPT, batch, loss_fn

STEPS, LR = 3, 3e-3          # step 0 warms up; 1-2 are timed
SCHEDULES = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}


def timed(stage: PipelineStage, events: list) -> None:
    """Record the start and end of each forward and backward the stage computes (the
    waits for the other stage's tensors happen outside these two calls)."""
    for kind, name in (("F", "forward_one_chunk"), ("B", "backward_one_chunk")):
        compute = getattr(type(stage), name).__get__(stage)   # the stage's own method

        def run(chunk, *args, _compute=compute, _kind=kind, **kwargs):
            start = time.perf_counter()
            out = _compute(chunk, *args, **kwargs)
            events.append((_kind, chunk, start, time.perf_counter()))
            return out

        setattr(stage, name, run)


def train(schedule: str, micro: int, rank: int, stages: int, device) -> dict:
    per_stage = BLOCKS // stages
    part = TinyGPT(blocks=range(rank * per_stage, (rank + 1) * per_stage)).to(device)
    stage = PipelineStage(part, rank, stages, device)
    # the loss of each micro-batch is its mean; the schedule divides the summed
    # gradients by the number of micro-batches, so a step sees the whole batch's mean
    pipe = SCHEDULES[schedule](stage, n_microbatches=micro, loss_fn=loss_fn)
    opt = torch.optim.Adam(part.parameters(), lr=LR)
    losses, steps, times = [], [], []
    for step in range(STEPS):
        x, y = (t.to(device) for t in batch(step))
        events = []
        timed(stage, events)                  # this step's timeline
        dist.barrier()
        start = time.perf_counter()
        if rank == 0:
            pipe.step(x)                      # the first stage gets the tokens
        else:
            out = []
            pipe.step(target=y, losses=out)   # the last stage gets the targets
            losses.append(sum(v.item() for v in out) / micro)
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - start)
        steps.append(events)
    return {"schedule": schedule, "micro": micro, "steps": steps[1:],
            "times": times[1:], "losses": losses, "state": part.state_dict()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--micro", default="2,4,8", help="micro-batches per step to try")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, stages = dist.get_rank(), dist.get_world_size()
    if BLOCKS % stages:
        raise SystemExit(f"{BLOCKS} blocks do not split into {stages} stages")

    whole = TinyGPT().to(device)              # the reference: one process, whole model
    opt = torch.optim.Adam(whole.parameters(), lr=LR)
    ref_losses, ref_times = [], []
    for step in range(STEPS):
        x, y = (t.to(device) for t in batch(step))
        start = time.perf_counter()
        loss = loss_fn(whole(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_times.append(time.perf_counter() - start)
        ref_losses.append(loss.item())
    reference = whole.state_dict()

    runs = []
    for micro in (int(m) for m in args.micro.split(",")):
        if BATCH % micro:
            raise SystemExit(f"{BATCH} sequences do not split into {micro} "
                             "micro-batches")
        for schedule in SCHEDULES:
            run = train(schedule, micro, rank, stages, device)
            state = run.pop("state")          # this stage's names are the whole model's
            run["weight_diff"] = max((w - reference[k]).abs().max().item()
                                     for k, w in state.items())
            everyone = [None] * stages
            dist.all_gather_object(everyone, run)
            runs.append(everyone)
    if rank == 0:
        print(f"TinyGPT in {stages} stages on {device.type}, {BATCH} sequences a step, "
              f"{STEPS} Adam steps;\nlast step per stage (F forward, B backward):")
        for everyone in runs:
            head = f"{everyone[0]['schedule']:>5}, {everyone[0]['micro']} micro-batches"
            for s, run in enumerate(everyone):
                order = " ".join(f"{k}{c}" for k, c, _, _ in run["steps"][-1])
                print(f"{head if s == 0 else '':<24} stage {s}: {order}")
            diff = max(r["weight_diff"] for r in everyone)
            loss_diff = max(abs(a - b) for a, b in zip(everyone[-1]["losses"],
                                                       ref_losses))
            print(f"{'':<24} largest difference from the whole model: weights "
                  f"{diff:.1e}, loss {loss_diff:.1e}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"stages": stages, "device": device.type, "batch": BATCH,
                           "runs": runs, "ref_losses": ref_losses,
                           "ref_times": ref_times[1:]}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
