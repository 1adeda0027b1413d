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
"""
import argparse
import json
import textwrap
import time

import numpy as np
import paddle
import paddle.distributed as dist
import paddle.nn.functional as F
from paddle import nn

VOCAB, WIDTH, HEADS, BLOCKS, SEQ = 64, 32, 4, 2, 16   # sizes of the model
BATCH, STEPS, LR = 8, 8, 0.5        # sequences per step, steps, SGD's rate


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


def tp_plan() -> dict:
    """Megatron's split of every block, by the layers' names."""
    plan = {}
    for i in range(BLOCKS):
        plan |= {f"blocks.{i}.{name}": dist.ColWiseParallel() for name in ("wq", "wk",
                                                                          "wv", "w1")}
        plan |= {f"blocks.{i}.{name}": dist.RowWiseParallel() for name in ("wo", "w2")}
    return plan


def train(layout: str, control: bool = False, sharding: int = 0,
          views: bool = False) -> dict:
    r, s, t, p = (int(n) for n in layout.split("x"))
    if s > 1 or p > 1:
        raise SystemExit(f"{layout}: this script composes replicate x tensor only")
    mesh = dist.ProcessMesh(np.arange(r * t).reshape(r, t).tolist(),
                            dim_names=["dp", "mp"])
    model = Model()
    opt = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    config = {"dp_config": {"sharding_level": sharding}}
    if t > 1:
        config["mp_config"] = {"parallelize_plan": tp_plan()}
    model, opt = dist.parallelize(model, opt, mesh=mesh, config=config)
    losses, times = [], []
    for step in range(STEPS):
        # the batch split along "dp", whole along "mp"
        x, y = (dist.shard_tensor(v, mesh, [dist.Shard(0), dist.Replicate()])
                for v in (batch_as_views if views else batch)(step))
        dist.barrier()
        start = time.perf_counter()
        loss = loss_fn(model(x), y)
        (loss / r if control else loss).backward()   # the control: averaged twice
        opt.step()
        opt.clear_grad()
        times.append(time.perf_counter() - start)
        losses.append(float(loss))
    return {"layout": layout, "replicate": r, "shard": s, "tp": t, "pp": p,
            "control": control, "views": views, "losses": losses, "step_s": times}


def alone() -> list[float]:
    """The whole model in one process, whole batches: the reference loss curve."""
    model = Model()
    opt = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    out = []
    for step in range(STEPS):
        x, y = batch(step)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        out.append(float(loss))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", nargs="+", default=["4x1x1x1"])
    ap.add_argument("--control", default=None, help="a layout to train with its "
                    "gradients averaged twice")
    ap.add_argument("--views", default=None, help="a layout to train with its batch "
                    "passed as slices of one tensor")
    ap.add_argument("--try-sharding", action="store_true",
                    help="first try dp_config's sharding_level 1 (ZeRO-1) and say what "
                    "happens")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    paddle.set_device("cpu")
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    ref = alone() if rank == 0 else None       # rank 0 compares
    notes = []
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
    jobs = [(layout, False, False) for layout in args.layouts]
    jobs += [(args.control, True, False)] if args.control else []
    jobs += [(args.views, False, True)] if args.views else []
    for layout, control, views in jobs:
        start = time.perf_counter()
        run = train(layout, control, views=views)
        run["wall_s"] = time.perf_counter() - start
        runs.append(run)
        if rank == 0:
            worst = max(abs(a - b) / b for a, b in zip(run["losses"], ref))
            how = " (gradients averaged twice)" if control else \
                " (batch as views)" if views else ""
            print(f"{layout}{how}: "
                  f"loss {run['losses'][0]:.4f} -> {run['losses'][-1]:.4f}, "
                  f"at most {worst:.1e} off one process")
    if rank == 0:
        print(f"one process: loss {ref[0]:.4f} -> {ref[-1]:.4f}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "reference": ref, "runs": runs,
                           "notes": notes,
                           "sizes": {"vocab": VOCAB, "width": WIDTH, "heads": HEADS,
                                     "blocks": BLOCKS, "seq": SEQ, "batch": BATCH,
                                     "steps": STEPS, "lr": LR, "micro": 1}}, f)


if __name__ == "__main__":
    main()
