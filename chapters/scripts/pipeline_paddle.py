"""TinyGPT in two pipeline stages in Paddle, GPipe and 1F1B schedules.

    python -m paddle.distributed.launch --nproc_per_node 2 pipeline_paddle.py
    python -m paddle.distributed.launch --gpus 0,1 pipeline_paddle.py --device gpu

First it tries Paddle's own pipeline (fleet's PipelineLayer and PipelineParallel) and
says what happened; on GPUs that is the way to train in stages. Then it runs the two
schedules written out with paddle.distributed's point-to-point calls (send, recv),
which also work on CPU ranks: rank 0 holds the embedding and the first half of the
blocks, rank 1 the rest and the head. Every stage records when it computes, on the
clock all processes of this machine share, and trains next to a whole copy of the
model: their weights must agree.
"""
import argparse
import json
import time
import traceback

import paddle
import paddle.distributed as dist
from paddle.distributed import fleet
from paddle.distributed.fleet.meta_parallel import LayerDesc, PipelineLayer

from tinygpt_paddle import BATCH, BLOCKS, VOCAB, WIDTH, Block, TinyGPT, batch, loss_fn

STEPS, LR = 3, 3e-3          # step 0 warms up; 1-2 are timed


def fleet_pipeline(micro: int) -> None:
    """Paddle's pipeline: the model as a list of layer descriptions, cut into stages by
    PipelineLayer; PipelineParallel.train_batch runs the 1F1B schedule."""
    class Head(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.norm = paddle.nn.LayerNorm(WIDTH)
            self.out = paddle.nn.Linear(WIDTH, VOCAB)

        def forward(self, h):
            return self.out(self.norm(h))

    class Loss(paddle.nn.Layer):
        def forward(self, logits, targets):
            return loss_fn(logits, targets)

    layers = [LayerDesc(paddle.nn.Embedding, VOCAB, WIDTH)]
    layers += [LayerDesc(Block) for _ in range(BLOCKS)] + [LayerDesc(Head)]
    model = PipelineLayer(layers=layers, num_stages=2, loss_fn=Loss())
    opt = paddle.optimizer.Adam(learning_rate=LR, parameters=model.parameters())
    model = fleet.distributed_model(model)          # a PipelineParallel
    opt = fleet.distributed_optimizer(opt)
    x, y = batch(0)
    loss = model.train_batch([x, y], opt)           # micro-batches of BATCH // micro
    print(f"fleet PipelineLayer: trained one step, loss {float(loss):.4f}")


def stage_step(schedule: str, part, rank: int, micro: int, x, y, events: list):
    """One training step of this stage, micro-batch by micro-batch, in the order the
    schedule gives. Returns the mean loss (last stage) or None.

    On gloo a send waits until the other rank receives: two stages sending to each
    other at once would wait forever. So rank 1 holds each gradient back until it has
    received the next activations (PyTorch's schedules send and receive together)."""
    first, last = rank == 0, rank == 1
    xs, ys = paddle.split(x, micro), paddle.split(y, micro)
    inputs, outputs, losses, held = {}, {}, [], []

    def forward(i):
        if first:
            h = xs[i]
        else:                                       # the activations of rank 0
            h = paddle.empty([BATCH // micro, x.shape[1], WIDTH])
            dist.recv(h, src=0)
            h.stop_gradient = False
            inputs[i] = h
            while held:                             # now rank 0 is listening
                dist.send(held.pop(0), dst=0)
        start = time.perf_counter()
        out = part(h)
        if last:
            out = loss_fn(out, ys[i]) / micro       # the mean over the whole batch
            losses.append(float(out) * micro)
        events.append(("F", i, start, time.perf_counter()))
        if first:
            dist.send(out.detach(), dst=1)
        outputs[i] = out

    def backward(i):
        grad = None
        if not last:                                # the gradient of rank 1's input
            grad = paddle.empty(outputs[i].shape)
            dist.recv(grad, src=1)
        start = time.perf_counter()
        paddle.autograd.backward([outputs.pop(i)], None if last else [grad])
        events.append(("B", i, start, time.perf_counter()))
        if not first:
            held.append(inputs.pop(i).grad)

    if schedule == "GPipe":          # all forwards, then all backwards
        order = [("F", i) for i in range(micro)] + [("B", i) for i in range(micro)]
    else:                            # 1F1B: warm up, then one forward, one backward
        warmup = min(micro, 2 - rank - 1)
        order = [("F", i) for i in range(warmup)]
        for i in range(micro - warmup):
            order += [("F", warmup + i), ("B", i)]
        order += [("B", i) for i in range(micro - warmup, micro)]
    for kind, i in order:
        (forward if kind == "F" else backward)(i)
    while held:                                     # the last gradients
        dist.send(held.pop(0), dst=0)
    return sum(losses) / micro if last else None


def train(schedule: str, micro: int, rank: int) -> dict:
    half = BLOCKS // 2
    part = TinyGPT(blocks=range(rank * half, (rank + 1) * half))
    opt = paddle.optimizer.Adam(learning_rate=LR, parameters=part.parameters())
    steps, losses, times = [], [], []
    for step in range(STEPS):
        x, y = batch(step)
        events = []
        dist.barrier()
        start = time.perf_counter()
        loss = stage_step(schedule, part, rank, micro, x, y, events)
        opt.step()
        opt.clear_grad()
        times.append(time.perf_counter() - start)
        steps.append(events)
        losses.append(loss)
    return {"schedule": schedule, "micro": micro, "steps": steps[1:],
            "times": times[1:], "losses": losses, "state": part.state_dict()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--micro", default="2,4,8", help="micro-batches per step to try")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    paddle.set_device(args.device)
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 1, "pp_degree": 2}
    strategy.pipeline_configs = {"accumulate_steps": 4, "micro_batch_size": BATCH // 4}
    fleet.init(is_collective=True, strategy=strategy)
    rank = dist.get_rank()
    if dist.get_world_size() != 2:
        raise SystemExit("this script runs two stages: start it on 2 ranks")
    whole = TinyGPT()                       # the reference: one process, whole model
    opt = paddle.optimizer.Adam(learning_rate=LR, parameters=whole.parameters())
    ref_losses, ref_times = [], []
    for step in range(STEPS):
        x, y = batch(step)
        start = time.perf_counter()
        loss = loss_fn(whole(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        ref_times.append(time.perf_counter() - start)
        ref_losses.append(float(loss))
    reference = whole.state_dict()

    runs = []
    for micro in (int(m) for m in args.micro.split(",")):
        for schedule in ("GPipe", "1F1B"):
            run = train(schedule, micro, rank)
            state = run.pop("state")          # this stage's names are the whole model's
            run["weight_diff"] = max(float((w - reference[k]).abs().max())
                                     for k, w in state.items())
            everyone = []
            dist.all_gather_object(everyone, run)
            runs.append(everyone)
    # last: a failed attempt can leave messages unread between the ranks
    for attempt in ("as installed", "with the device id filled in"):
        try:
            fleet_pipeline(micro=4)
            break
        except Exception as e:                       # what Paddle says
            print(f"fleet PipelineLayer, {attempt}: {type(e).__name__}: {e}".strip())
            where = traceback.extract_tb(e.__traceback__)[-1]
            print(f"    raised in {where.name} ({where.filename.split('paddle/')[-1]})")
            if "_device_id" not in str(e):
                break
            # Paddle's CPU build never sets the device id PipelineLayer reads
            dist.ParallelEnv._device_id = 0

    if rank == 0:
        print(f"TinyGPT in 2 stages on {args.device}, {BATCH} sequences per step, "
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
                json.dump({"stages": 2, "device": args.device, "batch": BATCH,
                           "runs": runs, "ref_losses": ref_losses,
                           "ref_times": ref_times[1:]}, f)


if __name__ == "__main__":
    main()
