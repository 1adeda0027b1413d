"""TinyGPT on 2 pipeline ranks in Paddle: GPipe, 1F1B, interleaved 1F1B (two virtual
stages per rank, one block each) and the zero-bubble schedule ZB-H1, written out with
paddle.distributed's point-to-point calls (send, recv).

    python -m paddle.distributed.launch --nproc_per_node 2 schedules_paddle.py
    python -m paddle.distributed.launch --gpus 0,1 schedules_paddle.py --device gpu

Each schedule is a list of passes per rank: F (forward) and B (backward) of a stage
and a micro-batch; ZB-H1 splits the backward into B (the gradient of the stage's input)
and W (the gradient of its linear layers' weights, computed later). Every stage
records when it computes, on the clock all processes of this machine share, and how
many bytes each micro-batch's forward saves for its backward; every schedule trains
next to a whole copy of the model, and their weights must agree.
"""
import argparse
import json
import textwrap
import time

import paddle
import paddle.distributed as dist
from paddle.autograd import PyLayer

from tinygpt_paddle import BATCH, BLOCKS, SEQ, WIDTH, TinyGPT, batch, loss_fn

STEPS, LR = 3, 3e-3          # step 0 warms up; 1-2 are timed
VIRTUAL = {"GPipe": 1, "1F1B": 1, "Interleaved 1F1B": 2, "ZB-H1": 1}  # stages per rank
DEFERRED = []                # (linear layer, its input, its output's gradient) of a B


class DeferredLinear(PyLayer):
    """A linear layer whose backward computes only the gradient of its input; what
    the weights' gradient needs waits in DEFERRED for the W pass."""
    @staticmethod
    def forward(ctx, x, layer):
        ctx.save_for_backward(x)
        ctx.layer = layer
        out = paddle.matmul(x, layer.weight)          # weight: (in, out)
        return out if layer.bias is None else out + layer.bias

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensor()
        DEFERRED.append((ctx.layer, x, grad))
        return paddle.matmul(grad, ctx.layer.weight, transpose_y=True)


def weight_gradients(deferred: list) -> None:
    """The W pass: each linear layer's weight and bias gradients, added to .grad."""
    for layer, x, grad in deferred:
        x, grad = x.reshape([-1, x.shape[-1]]), grad.reshape([-1, grad.shape[-1]])
        for p, g in ((layer.weight, paddle.matmul(x, grad, transpose_x=True)),
                     (layer.bias, grad.sum(0))):
            if p is not None:
                p.grad = g if p.grad is None else p.grad + g


def zero_bubble_h1(ranks: int, micro: int) -> list[list[tuple]]:
    """ZB-H1's passes for every rank (Qi et al., "Zero Bubble Pipeline Parallelism",
    ICLR 2024), from a clock on which every pass takes 1: a free rank runs the B of its
    oldest micro-batch once the next stage's B is done, else a forward while it holds
    fewer than 2p - rank - 1 micro-batches (until their W), else its oldest W."""
    orders, done = [[] for _ in range(ranks)], {}
    fwd = [0] * ranks                               # the next forward's micro-batch
    wait_b = [[] for _ in range(ranks)]             # forwarded, waiting for their B
    wait_w = [[] for _ in range(ranks)]             # B done, waiting for their W
    t = 0
    while any(len(o) < 3 * micro for o in orders):
        for r in range(ranks):
            if orders[r] and done[orders[r][-1]] > t:
                continue                            # still busy
            ready = lambda key: done.get(key, t + 1) <= t
            if wait_b[r] and (r == ranks - 1 or ready(("B", r + 1, wait_b[r][0]))):
                wait_w[r].append(wait_b[r].pop(0))
                step = ("B", r, wait_w[r][-1])
            elif (fwd[r] < micro and len(wait_b[r]) + len(wait_w[r]) < 2 * ranks - r - 1
                  and (r == 0 or ready(("F", r - 1, fwd[r])))):
                wait_b[r].append(fwd[r])
                step, fwd[r] = ("F", r, fwd[r]), fwd[r] + 1
            elif wait_w[r]:
                step = ("W", r, wait_w[r].pop(0))
            else:
                continue                            # waits for the other ranks
            orders[r].append(step)
            done[step] = t + 1
        t += 1
    return orders


def order(schedule: str, rank: int, ranks: int, micro: int) -> list[tuple]:
    """This rank's passes, (kind, stage, micro-batch), in the schedule's order. Stage s
    sits on rank s % ranks: with two stages per rank, rank 0 holds stages 0 and 2."""
    if schedule == "ZB-H1":
        return zero_bubble_h1(ranks, micro)[rank]
    if schedule == "GPipe":          # all forwards, then all backwards
        return [("F", rank, i) for i in range(micro)] + \
               [("B", rank, i) for i in range(micro)]
    # 1F1B, and interleaved 1F1B as Megatron-LM orders it (Narayanan et al. 2021):
    # forwards go through the rank's stages `ranks` micro-batches at a time (the k-th
    # forward is micro-batch i of its stage v), backwards through them in reverse
    v = VIRTUAL[schedule]
    total = micro * v

    def nth(k, backward):
        stage = (k // ranks) % v
        i = (k // (ranks * v)) * ranks + k % ranks
        return (v - 1 - stage if backward else stage) * ranks + rank, i

    warmup = min(total, (ranks - rank - 1) * (2 if v > 1 else 1) + (v - 1) * ranks)
    passes = [("F", *nth(k, False)) for k in range(warmup)]
    for k in range(total - warmup):  # steady state: one forward, one backward
        passes += [("F", *nth(warmup + k, False)), ("B", *nth(k, True))]
    return passes + [("B", *nth(k, True)) for k in range(total - warmup, total)]


def message_order(orders: list[list[tuple]], stages: int) -> tuple[list, list]:
    """When each pass may start, and every transfer between ranks in one order both
    ranks follow. A send on gloo waits until the other rank receives: if both ranks
    sent at once they would wait forever. So the ranks replay the schedule on a clock
    of their own (a forward or W takes 1, a backward 2) and do their sends and receives
    in the order that clock gives them."""
    ranks = len(orders)
    done, starts, free, pos = {}, [[] for _ in orders], [0.0] * ranks, [0] * ranks
    while any(pos[r] < len(orders[r]) for r in range(ranks)):
        moved = False
        for r in range(ranks):
            if pos[r] == len(orders[r]):
                continue
            kind, s, i = orders[r][pos[r]]
            needs = [("F", s - 1, i)] if kind == "F" and s > 0 else []
            if kind == "B":
                needs = [("F", s, i)] + ([("B", s + 1, i)] if s < stages - 1 else [])
            if kind == "W":
                needs = [("B", s, i)]
            if all(n in done for n in needs):
                start = max([free[r]] + [done[n] for n in needs])
                free[r] = done[(kind, s, i)] = start + (2 if kind == "B" else 1)
                starts[r].append(start)
                pos[r] += 1
                moved = True
        if not moved:
            raise ValueError("the passes wait on each other: not a valid schedule")
    sends = [(t, kind, s, i) for (kind, s, i), t in done.items()
             if (kind == "F" and s < stages - 1) or (kind == "B" and s > 0)]
    return starts, sorted(sends)


def stage_step(schedule: str, parts: dict, rank: int, ranks: int, micro: int, x, y,
               events: list, saved: dict) -> float | None:
    """One training step of this rank's stages; returns the mean loss on the rank that
    holds the last stage."""
    stages = ranks * VIRTUAL[schedule]
    orders = [order(schedule, r, ranks, micro) for r in range(ranks)]
    starts, sends = message_order(orders, stages)
    xs, ys = paddle.split(x, micro), paddle.split(y, micro)
    mb = BATCH // micro
    inbox, outbox, inputs, outputs, losses, deferred = {}, {}, {}, {}, [], {}
    weights = {p.data_ptr() for part in parts.values() for p in part.parameters()}

    def transfer(kind, s, i):
        """The activations of stage s (F) go to stage s + 1, the gradient of its input
        (B) to stage s - 1."""
        src, dst = s % ranks, (s + (1 if kind == "F" else -1)) % ranks
        if src == rank:
            dist.send(outbox.pop((kind, s, i)), dst=dst)
        elif dst == rank:
            buf = paddle.empty([mb, SEQ, WIDTH])
            dist.recv(buf, src=src)
            inbox[(kind, s, i)] = buf

    def forward(s, i):
        if s == 0:
            h = xs[i]
        else:
            h = inbox.pop(("F", s - 1, i))
            h.stop_gradient = False
            inputs[(s, i)] = h
        held = {}

        def pack(t):           # every tensor saved for backward passes through here
            if t.data_ptr() not in weights:
                held[t.data_ptr()] = t.numel().item() * t.element_size()
            return t

        start = time.perf_counter()
        with paddle.autograd.saved_tensors_hooks(pack, lambda t: t):
            out = parts[s](h)
            if s == stages - 1:
                out = loss_fn(out, ys[i]) / micro    # the mean over the whole batch
        events.append(("F", s, i, start, time.perf_counter()))
        saved[s] = sum(held.values())
        if s == stages - 1:
            losses.append(float(out) * micro)
        else:
            outbox[("F", s, i)] = out.detach()
        outputs[(s, i)] = out

    def backward(s, i):
        grad = None if s == stages - 1 else [inbox.pop(("B", s + 1, i))]
        start = time.perf_counter()
        paddle.autograd.backward([outputs.pop((s, i))], grad)
        events.append(("B", s, i, start, time.perf_counter()))
        if s > 0:
            outbox[("B", s, i)] = inputs.pop((s, i)).grad
        deferred[(s, i)] = DEFERRED[:]              # empty unless the layers defer
        DEFERRED.clear()

    def weight(s, i):
        start = time.perf_counter()
        weight_gradients(deferred.pop((s, i)))
        events.append(("W", s, i, start, time.perf_counter()))

    pending = list(sends)
    for (kind, s, i), start in zip(orders[rank], starts[rank]):
        while pending and pending[0][0] <= start:   # transfers due before this pass
            transfer(*pending.pop(0)[1:])
        {"F": forward, "B": backward, "W": weight}[kind](s, i)
    for _, *message in pending:
        transfer(*message)
    return sum(losses) / micro if losses else None


def train(schedule: str, micro: int, rank: int, ranks: int) -> dict:
    stages = ranks * VIRTUAL[schedule]
    per_stage = BLOCKS // stages
    parts = {s: TinyGPT(blocks=range(s * per_stage, (s + 1) * per_stage))
             for s in range(rank, stages, ranks)}
    if schedule == "ZB-H1":          # linear layers leave their weights' gradient to W
        for part in parts.values():
            for layer in part.sublayers():
                if isinstance(layer, paddle.nn.Linear):
                    layer.forward = lambda x, lin=layer: DeferredLinear.apply(x, lin)
    params = [p for part in parts.values() for p in part.parameters()]
    opt = paddle.optimizer.Adam(learning_rate=LR, parameters=params)
    steps, losses, times, saved = [], [], [], {}
    for step in range(STEPS):
        x, y = batch(step)
        events = []
        dist.barrier()
        start = time.perf_counter()
        loss = stage_step(schedule, parts, rank, ranks, micro, x, y, events, saved)
        opt.step()
        opt.clear_grad()
        times.append(time.perf_counter() - start)
        steps.append(events)
        if loss is not None:
            losses.append(loss)
    state = {k: v for part in parts.values() for k, v in part.state_dict().items()}
    return {"schedule": schedule, "micro": micro, "virtual": VIRTUAL[schedule],
            "stages": list(parts), "steps": steps[1:], "times": times[1:],
            "losses": losses, "saved_bytes": saved, "state": state}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--micro", default="4,8", help="micro-batches per step to try")
    ap.add_argument("--schedules", default=",".join(VIRTUAL))
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    paddle.set_device(args.device)
    dist.init_parallel_env()
    rank, ranks = dist.get_rank(), dist.get_world_size()

    whole = TinyGPT()                       # the reference: one process, whole model
    opt = paddle.optimizer.Adam(learning_rate=LR, parameters=whole.parameters())
    ref_losses = []
    for step in range(STEPS):
        x, y = batch(step)
        loss = loss_fn(whole(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        ref_losses.append(float(loss))
    reference = whole.state_dict()

    runs = []
    for micro in (int(m) for m in args.micro.split(",")):
        for schedule in args.schedules.split(","):
            run = train(schedule, micro, rank, ranks)
            state = run.pop("state")          # this rank's names are the whole model's
            run["weight_diff"] = max(float((w - reference[k]).abs().max())
                                     for k, w in state.items())
            everyone = []
            dist.all_gather_object(everyone, run)
            runs.append(everyone)
    if rank == 0:
        print(f"TinyGPT on {ranks} pipeline ranks on {args.device}, {BATCH} sequences "
              f"per step, {STEPS} Adam steps;\nthe last step's passes per rank, in "
              "order\n"
              "(F forward, B backward, W weight gradient; stage.micro-batch):")
        for everyone in runs:
            print(f"{everyone[0]['schedule']}, {everyone[0]['micro']} micro-batches")
            for r, run in enumerate(everyone):
                passes = " ".join(f"{k}{s}.{c}" for k, s, c, _, _ in run["steps"][-1])
                # wrapped to the page's width: a long order was 265 characters
                print(textwrap.fill(f"  rank {r} (stages {run['stages']}): {passes}", 96,
                                    subsequent_indent="      "))
            diff = max(r["weight_diff"] for r in everyone)
            losses = next(r["losses"] for r in everyone if r["losses"])
            loss_diff = max(abs(a - b) for a, b in zip(losses, ref_losses))
            print(f"  largest difference from the whole model: weights {diff:.1e}, "
                  f"loss {loss_diff:.1e}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"framework": "Paddle", "ranks": ranks, "device": args.device,
                           "batch": BATCH, "runs": runs, "failed": {},
                           "ref_losses": ref_losses}, f)


if __name__ == "__main__":
    main()
