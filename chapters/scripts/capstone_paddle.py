"""The capstone's transformer in Paddle, composed on a ProcessMesh by the auto-parallel
API: a plan of ColWiseParallel / RowWiseParallel by layer name for the tensor axis, the
batch split along the data axis, both applied by dist.parallelize.

    python -m paddle.distributed.launch --nproc_per_node 4 capstone_paddle.py \\
        --layouts 4x1x1x1 2x1x2x1 1x1x4x1 --out runs.json

A layout "RxSxTxP" is replicate x shard x tensor x pipeline, as in capstone_torch.py.
On CPU ranks this script runs S = 1 and P = 1: Paddle's sharding (dp_config's
sharding_level 1 to 3) needs a reduce-scatter kernel its CPU build lacks, which
"--try-sharding" shows. Every layout trains from the same weights on the same batches,
in float32, next to one process training the whole model; "--control" trains one more
layout whose loss is divided by the data-parallel ranks before Paddle averages the
gradients over them: the gradients averaged twice.

What a step costs, per layout: the collectives each rank ran in its second step, counted
from Paddle's own log of its reshard functions (through which dist.parallelize and a
distributed tensor's reshard run every collective on CPU), the bytes of the rank's shares
of the weights and gradients (a distributed tensor's local value) and, in its third step,
the bytes the process wrote (Linux's /proc/self/io: gloo's sockets among them).

The training state (the weights, the schedule's position, the data's position) is
checkpointed with dist.save_state_dict and loaded with dist.load_state_dict:
"--ckpt-dir DIR" saves each layout every "--save-every" steps into DIR/<layout>/step-N
(written into tmp-step-N, committed by the rename once every rank has written) and
starts a layout from the newest complete checkpoint there; "--resume LAYOUT DIR"
trains LAYOUT from the newest complete checkpoint in DIR. On CPU ranks Paddle loads a
checkpoint in the layout that saved it (each rank reads its own file) or in one
process (which reads every file); loading it in another layout on several ranks needs
a GPU, which "--resume" on several ranks shows. "--kill-at S" kills a rank at step S
of a run started from step 0, after its share of step S's checkpoint is written and
before the checkpoint is committed. Paddle's launcher restarts a job only under an
etcd master; without one, rerun the launch, and the run goes on from its checkpoint:

    for attempt in 1 2; do
      python -m paddle.distributed.launch --nproc_per_node 4 --log_dir log$attempt \\
        capstone_paddle.py --layouts 2x1x2x1 --ckpt-dir ckpt --kill-at 6 && break
    done
"""
import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import textwrap
import time
import traceback
from collections import Counter
from pathlib import Path

# Paddle's reshard functions log each communication they run ("Call `AllReduce` in
# Resharding on CPU") at glog's level 4; their log is read once, when Paddle loads, and
# switched on only for the step that is counted (see Comm)
RESHARDS = ["s_to_r", "p_to_r", "r_to_s", "s_to_s", "p_to_s", "r_to_p", "s_to_p"]
os.environ["GLOG_vmodule"] = ",".join(f"{f}_reshard_function=4" for f in RESHARDS)
os.environ["GLOG_minloglevel"] = "0"

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
from paddle import nn  # noqa: E402

VOCAB, WIDTH, HEADS, BLOCKS, SEQ = 64, 32, 4, 2, 16   # sizes of the model
BATCH, STEPS, LR = 8, 8, 0.5        # sequences per step, steps, SGD's first rate


class Block(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        # no bias on q, k, v: a key's bias adds the same to every score of a row
        self.wq, self.wk, self.wv = (nn.Linear(WIDTH, WIDTH, bias_attr=False)
                                     for _ in "qkv")
        self.wo = nn.Linear(WIDTH, WIDTH)
        self.w1, self.w2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        # Paddle's attention takes (batch, seq, heads, head width)
        q, k, v = (w(h).reshape([b, s, -1, WIDTH // HEADS])
                   for w in (self.wq, self.wk, self.wv))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.reshape([b, s, -1]))
        return x + self.w2(F.gelu(self.w1(self.norm2(x))))


class Model(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        paddle.seed(0)                  # the same initial weights in every process
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.LayerList([Block() for _ in range(BLOCKS)])
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


def loss_fn(logits: paddle.Tensor, targets: paddle.Tensor) -> paddle.Tensor:
    return F.cross_entropy(logits.reshape([-1, VOCAB]), targets.reshape([-1]))


def batch(step: int) -> tuple[paddle.Tensor, paddle.Tensor]:
    """Step ``step``'s BATCH sequences: token t+1 follows from token t by a rule."""
    rng = np.random.default_rng(step)
    start = rng.integers(0, VOCAB, size=(BATCH, 1))
    stride = rng.integers(1, 8, size=(BATCH, 1))
    tokens = (start + stride * np.arange(SEQ + 1)) % VOCAB
    # two arrays, not two slices of one tensor: see batch_as_views
    return paddle.to_tensor(tokens[:, :-1]), paddle.to_tensor(tokens[:, 1:])


def batch_as_views(step: int) -> tuple[paddle.Tensor, paddle.Tensor]:
    """The same batch as two slices of one tensor (views with the whole's strides):
    dist.shard_tensor then gives the data-parallel ranks rows other than its split
    names, and the loss leaves the one-process curve at the first step ("--views")."""
    x, y = batch(step)
    tokens = paddle.concat([x, y[:, -1:]], axis=1)
    return tokens[:, :-1], tokens[:, 1:]


def optimizer(parameters) -> tuple[paddle.optimizer.Optimizer,
                                  paddle.optimizer.lr.LRScheduler]:
    """SGD on a cosine schedule, whose position a resumed run needs. dist.parallelize
    takes SGD and AdamW only; AdamW would let the control pass (a gradient scaled by
    a constant takes almost the same step), and SGD has no state of its own."""
    sched = paddle.optimizer.lr.CosineAnnealingDecay(LR, T_max=STEPS, eta_min=LR / 10)
    return paddle.optimizer.SGD(learning_rate=sched, parameters=parameters), sched


# ---------------------------------------------------------------- the state, saved
def barrier() -> None:
    if dist.get_world_size() > 1:          # one process has no group to wait on
        dist.barrier()


def complete(folder) -> list[Path]:
    """The committed checkpoints in ``folder``, oldest first. Paddle writes a
    checkpoint's metadata before its data files, so a folder holding metadata may be
    half written: only the rename from ``tmp-step-N`` to ``step-N`` commits one."""
    found = Path(folder).glob("step-*") if Path(folder).is_dir() else []
    return sorted(p for p in found if any(p.glob("*.metadata")))


def state_of(model, sched, step: int, layout: str = "0x0x0x0") -> dict:
    """The weights (each rank's shards: distributed tensors under tensor parallelism), the
    schedule's and the data's positions and the layout that saved them, as tensors:
    dist.save_state_dict saves tensors only. (Paddle's random generator state is an
    object it does not take; the run draws no random numbers after making the
    weights.)"""
    return {**model.state_dict(),
            "saved_by.layout": paddle.to_tensor([int(n) for n in layout.split("x")],
                                                dtype="int64"),
            "saved_by.ranks": paddle.to_tensor([dist.get_world_size()], dtype="int64"),
            "schedule.last_epoch": paddle.to_tensor([sched.last_epoch], dtype="int64"),
            # the cosine schedule computes each rate from the last one
            "schedule.last_lr": paddle.to_tensor([sched.last_lr], dtype="float64"),
            "data.position": paddle.to_tensor([step], dtype="int64")}


def save(model, sched, step: int, folder: Path, layout: str,
         die: bool = False) -> float:
    """Save into tmp-step-N; once every rank has written, rank 0 renames it step-N.
    save_replicas: each rank writes every tensor it holds (not one copy of each), so
    that each rank can load its own file back without moving tensors between ranks,
    which Paddle's loader does on GPUs only."""
    tmp = folder / f"tmp-step-{step:06d}"
    if dist.get_rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)            # an interrupted save's
        tmp.mkdir(parents=True)
    barrier()
    start = time.perf_counter()
    dist.save_state_dict(state_of(model, sched, step, layout), str(tmp),
                         save_replicas=True)
    if die:            # the demonstration: this rank dies, its share written
        os.kill(os.getpid(), signal.SIGKILL)
    barrier()                      # every rank has written its share
    if dist.get_rank() == 0:
        os.rename(tmp, tmp.with_name(tmp.name.removeprefix("tmp-")))
    return time.perf_counter() - start


class CheckpointMismatch(ValueError):
    """A checkpoint that does not fit the model it is loaded into."""


def misfits(state: dict, path: Path) -> list[str]:
    """What in the checkpoint does not fit ``state``: a tensor it lacks, holds at
    another global shape, or holds and the model does not."""
    (meta,) = path.glob("*.metadata")
    saved = {k: tuple(v[0].global_shape) for k, v in
             paddle.load(str(meta)).state_dict_metadata.items()}
    problems = []
    for key, t in state.items():
        shape = tuple(t.shape)         # a distributed tensor's shape is its global one
        if key not in saved:
            problems.append(f"missing {key}")
        elif saved[key] != shape:
            problems.append(f"{key} is {list(saved[key])} in the checkpoint, "
                            f"{list(shape)} in the model")
    problems += [f"{k} is not in the model" for k in sorted(saved) if k not in state]
    return problems


def load(path: Path, model, sched, layout: str) -> dict:
    """Load the checkpoint at ``path`` into this layout's model and schedule, after
    checking that it fits (stopping with what does not, before anything is read)."""
    start = time.perf_counter()
    state = state_of(model, sched, 0)
    problems = misfits(state, path)
    if problems:
        shown = [p for p in problems if " is [" in p][:3] + \
            [p for p in problems if p.startswith("missing")][:3] + \
            [p for p in problems if p.endswith("not in the model")][:3]
        raise CheckpointMismatch(f"checkpoint {path} does not fit this model "
                                 f"({layout}): " + "; ".join(shown) +
                                 (f" (and {len(problems) - len(shown)} more)"
                                  if len(problems) > len(shown) else ""))
    dist.load_state_dict(state, str(path))          # into the model's own tensors
    sched.set_state_dict({"last_epoch": int(state["schedule.last_epoch"].item()),
                          "last_lr": float(state["schedule.last_lr"].item())})
    saved = state["saved_by.layout"].tolist()
    return {"from": str(path), "step": int(state["data.position"].item()),
            "saved_by": {"layout": "x".join(map(str, saved)),
                         "ranks": int(state["saved_by.ranks"].item())},
            "load_s": time.perf_counter() - start}


# ---------------------------------------------------------------- what a step costs
COLLECTIVES = {"AllGather": "all_gather", "AllReduce": "all_reduce",
               "ReduceScatter": "reduce_scatter", "AllToAll": "all_to_all"}
CALL = re.compile(r"_reshard_function\.cc:\d+\] Call `(\w+)` in Resharding")


def vlog(level: int) -> None:
    paddle.base.core.set_vlog_level({f"{f}_reshard_function": level for f in RESHARDS})


class Comm:
    """The communication this rank's reshard functions ran inside the block, from
    Paddle's own log of them: every collective of dist.parallelize and of a distributed tensor's
    reshard on CPU goes through one. The log is switched on for the block only, and
    glog's lines (written to file descriptor 2) are read back from a temporary file;
    the lines that are not calls go on to stderr. Also the bytes this process wrote
    (Linux's /proc/self/io "wchar": its sockets, where gloo sends; and the log) in the
    block."""

    def __enter__(self):
        sys.stderr.flush()
        self.file, self.saved = tempfile.TemporaryFile(), os.dup(2)
        os.dup2(self.file.fileno(), 2)
        vlog(4)
        return self

    def __exit__(self, *args):
        vlog(0)
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        lines = self.file.read().decode(errors="replace").splitlines()
        self.file.close()
        calls = [m.group(1) for line in lines for m in [CALL.search(line)] if m]
        self.ops = dict(Counter(COLLECTIVES[c] for c in calls if c in COLLECTIVES))
        self.local = dict(Counter(c for c in calls if c not in COLLECTIVES))
        rest = [line for line in lines if "_reshard_function.cc:" not in line]
        if rest:
            print("\n".join(rest), file=sys.stderr, flush=True)


def written() -> int | None:
    """Bytes this process has written (sockets included), or None off Linux."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    return int(re.search(r"wchar: (\d+)", text).group(1))


def local_bytes(tensors) -> int:
    """Bytes of this rank's share of ``tensors`` (a distributed tensor's local shard)."""
    return sum(int(v._local_value().numel()) * v.element_size() if v.is_dist()
               else int(v.numel()) * v.element_size() for v in tensors)


def tp_plan() -> dict:
    """Megatron's split of every block, by the layers' names."""
    plan = {}
    for i in range(BLOCKS):
        plan |= {f"blocks.{i}.{name}": dist.ColWiseParallel() for name in ("wq", "wk",
                                                                          "wv", "w1")}
        plan |= {f"blocks.{i}.{name}": dist.RowWiseParallel() for name in ("wo", "w2")}
    return plan


def train(layout: str, control: bool = False, sharding: int = 0,
          views: bool = False, ckpt: str | None = None, every: int = 4,
          resume: str | None = None, kill_at: int | None = None,
          kill_rank: int = -1) -> dict:
    r, s, t, p = (int(n) for n in layout.split("x"))
    if s > 1 or p > 1:
        raise SystemExit(f"{layout}: this script composes replicate x tensor only")
    mesh = dist.ProcessMesh(np.arange(r * t).reshape(r, t).tolist(),
                            dim_names=["dp", "mp"])
    model = Model()
    opt, sched = optimizer(model.parameters())
    config = {"dp_config": {"sharding_level": sharding}}
    if t > 1:
        config["mp_config"] = {"parallelize_plan": tp_plan()}
    if r * t > 1:
        # (on one process, dist.load_state_dict into a model parallelized over a mesh
        # of one rank left its weights as they were, with no error: not parallelized)
        model, opt = dist.parallelize(model, opt, mesh=mesh, config=config)
    loaded, skipped, begin = None, [], 0
    source = resume or ckpt
    if source and complete(source):
        loaded = load(complete(source)[-1], model, sched, layout)
        begin = loaded["step"]
        skipped = [{"name": q.name, "metadata": any(q.glob("*.metadata"))}
                   for q in sorted(Path(source).glob("tmp-step-*"))]
    log = None
    if ckpt and dist.get_rank() == 0:        # the run's log, kept across restarts
        Path(ckpt).mkdir(parents=True, exist_ok=True)
        log = open(Path(ckpt) / "losses.txt", "a")
    losses, rates, times, saves = [], [], [], []
    comm, memory, sent = {}, {}, None
    for step in range(begin, STEPS):
        # the batch split along "dp", whole along "mp"
        x, y = (dist.shard_tensor(v, mesh, [dist.Shard(0), dist.Replicate()])
                for v in (batch_as_views if views else batch)(step))
        rates.append(sched.get_lr())
        barrier()
        # the second step (the first builds caches) counts its communication; the
        # third, not logging, the bytes written
        counted = step == begin + 1 and r * t > 1
        before = written() if step == begin + 2 else None
        start = time.perf_counter()
        with Comm() if counted else contextlib.nullcontext() as seen:
            loss = loss_fn(model(x), y)
            (loss / r if control else loss).backward()   # the control: averaged twice
            if counted:          # this rank's shares, the gradients before the update
                memory = {"tensors": len(model.parameters()),
                          "params": local_bytes(model.parameters()),
                          "grads": local_bytes(q.grad for q in model.parameters()
                                               if q.grad is not None),
                          "optimizer": local_bytes(
                              v for v in opt.state_dict().values()
                              if isinstance(v, paddle.Tensor))}
            opt.step()
            opt.clear_grad()
            sched.step()
        times.append(time.perf_counter() - start)
        if counted:
            comm = {"ops": seen.ops, "local": seen.local}
        if before is not None and written() is not None:
            sent = written() - before
        losses.append(float(loss))
        if log:
            print(step, repr(losses[-1]), file=log, flush=True)
        done = step + 1
        die = kill_at == done and begin == 0 and \
            dist.get_rank() == kill_rank % dist.get_world_size()
        if ckpt and done % every == 0 and done < STEPS:
            saves.append(save(model, sched, done, Path(ckpt), layout, die=die))
        elif die:
            os.kill(os.getpid(), signal.SIGKILL)
    if log:
        log.close()
    return {"layout": layout, "replicate": r, "shard": s, "tp": t, "pp": p,
            "control": control, "views": views, "start": begin, "losses": losses,
            "lr": rates, "step_s": times, "resumed": loaded, "skipped": skipped,
            "save_s": saves, "collectives": comm, "bytes_written": sent,
            "memory": memory}


def alone() -> list[float]:
    """The whole model in one process, whole batches: the reference loss curve."""
    model = Model()
    opt, sched = optimizer(model.parameters())
    out = []
    for step in range(STEPS):
        x, y = batch(step)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        sched.step()
        out.append(float(loss))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", nargs="*", default=None)
    ap.add_argument("--control", default=None, help="a layout to train with its "
                    "gradients averaged twice")
    ap.add_argument("--views", default=None, help="a layout to train with its batch "
                    "passed as slices of one tensor")
    ap.add_argument("--try-sharding", action="store_true",
                    help="first try dp_config's sharding_level 1 (ZeRO-1) and say what "
                    "happens")
    ap.add_argument("--ckpt-dir", default=None, help="save each layout's state into "
                    "DIR/<layout> and start from its newest complete checkpoint there")
    ap.add_argument("--save-every", type=int, default=4)
    ap.add_argument("--resume", nargs=2, action="append", default=[],
                    metavar=("LAYOUT", "DIR"), help="train LAYOUT from the newest "
                    "complete checkpoint in DIR")
    ap.add_argument("--kill-at", type=int, default=None)
    ap.add_argument("--kill-rank", type=int, default=-1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    paddle.set_device("cpu")
    vlog(0)                # the reshard log: off until a step is counted
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    ref = alone() if rank == 0 else None       # rank 0 compares
    notes = []
    try:         # a rank's peak memory, where Paddle's allocator keeps it
        allocator = f"max_memory_allocated: {paddle.device.max_memory_allocated()}"
    except Exception as e:
        allocator = (f"paddle.device.max_memory_allocated(): {type(e).__name__}: "
                     f"{str(e).strip().splitlines()[0].split('. ')[0][:120]}")
    if args.try_sharding:
        try:
            train(f"{world}x1x1x1", sharding=1)
            notes.append("sharding_level 1: ran")
        except Exception as e:         # what Paddle says where it does not run on CPU
            notes.append(f"sharding_level 1: {type(e).__name__}: "
                         f"{str(e).strip().splitlines()[-1][:200]}")
        if rank == 0:
            print(textwrap.fill(notes[-1], 88, subsequent_indent="    "))
    runs = []
    layouts = args.layouts if args.layouts is not None else \
        [] if args.resume else ["4x1x1x1"]
    jobs = [(layout, False, False, None) for layout in layouts]
    jobs += [(args.control, True, False, None)] if args.control else []
    jobs += [(args.views, False, True, None)] if args.views else []
    jobs += [(layout, False, False, folder) for layout, folder in args.resume]
    for layout, control, views, resume in jobs:
        if resume and not complete(resume):
            raise SystemExit(f"--resume {layout} {resume}: no complete checkpoint "
                             "there")
        ckpt = (f"{args.ckpt_dir}/{layout}" if args.ckpt_dir and not control
                and not views and not resume else None)
        start = time.perf_counter()
        try:
            run = train(layout, control, views=views, ckpt=ckpt, every=args.save_every,
                        resume=resume, kill_at=args.kill_at, kill_rank=args.kill_rank)
        except CheckpointMismatch:
            raise
        except Exception as e:         # a load Paddle does not do on CPU ranks
            if not resume:
                raise
            notes.append(f"--resume {layout} {resume} on {world} ranks: "
                         f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}")
            if rank == 0:
                print(textwrap.fill(notes[-1], 88, subsequent_indent="    "))
            continue
        run["wall_s"] = time.perf_counter() - start
        runs.append(run)
        if rank == 0:
            begin = run["start"]
            worst = max(abs(a - b) / b for a, b in zip(run["losses"], ref[begin:]))
            how = " (gradients averaged twice)" if control else \
                " (batch as views)" if views else ""
            if run["resumed"]:
                saved = run["resumed"]["saved_by"]
                how += (f" (resumed from step {begin} of {saved['layout']} on "
                        f"{saved['ranks']} ranks, in {run['resumed']['load_s']:.2f} s)")
            print(f"{layout}{how}:\n    " if run["resumed"] else f"{layout}{how}: ",
                  f"loss {run['losses'][0]:.4f} -> {run['losses'][-1]:.4f}, at most "
                  f"{worst:.1e} off one process", sep="")
    if rank == 0:
        print(f"one process: loss {ref[0]:.4f} -> {ref[-1]:.4f}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "reference": ref, "runs": runs,
                           "notes": notes, "allocator": allocator,
                           "sizes": {"vocab": VOCAB, "width": WIDTH, "heads": HEADS,
                                     "blocks": BLOCKS, "seq": SEQ, "batch": BATCH,
                                     "steps": STEPS, "lr": LR, "micro": 1}}, f)


if __name__ == "__main__":
    # With the reshard log on, Paddle 3.3 corrupts its heap while the interpreter shuts
    # down ("corrupted size vs. prev_size") and the rank hangs: leave without teardown.
    status = 0
    try:
        main()
    except SystemExit as e:                   # as Python itself would end
        status = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
