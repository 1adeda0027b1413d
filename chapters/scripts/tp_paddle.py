"""Tensor parallelism for the sharding chapter's TinyGPT in Paddle, on ranks.

    python -m paddle.distributed.launch --nproc_per_node 2 tp_paddle.py --out tp.json
    python -m paddle.distributed.launch --gpus 0,1 tp_paddle.py --device gpu

Each way of splitting trains STEPS steps beside the one-process model, from the same
weights on the same batches, and must agree with it:

  by hand  Megatron's two operators (Shoeybi et al. 2019) as PyLayers: f is the
           identity forward and an all-reduce of the gradient backward, g the reverse.
           Column-parallel linear (f, then this rank's columns of the (in, out) weight)
           then row-parallel linear (this rank's rows, then g): the attention's q/k/v
           product and its projection (a rank holds HEADS/tp heads), the MLP's two
           linears. Embedding, norms and head stay whole on every rank.
  fleet    the same split with fleet's layers under fleet.init(mp_degree=tp):
           ColumnParallelLinear, RowParallelLinear, and VocabParallelEmbedding for the
           embedding (split along the vocabulary).
  auto     the auto-parallel API: dist.parallelize with a plan of ColWiseParallel /
           RowWiseParallel by layer name, on a ProcessMesh.
  fleet SP fleet's sequence-parallel layers on one MLP: ScatterOp splits the tokens
           (sequence first: (s, b, h)), ColumnSequenceParallelLinear all-gathers them,
           RowSequenceParallelLinear reduce-scatters its output, GatherOp joins them.
"""
import argparse
import json
import textwrap

import paddle
import paddle.distributed as dist
import paddle.nn.functional as F
from paddle import nn
from paddle.autograd import PyLayer
from paddle.distributed import fleet
from paddle.distributed.fleet.utils.sequence_parallel_utils import (
    ColumnSequenceParallelLinear, GatherOp, RowSequenceParallelLinear, ScatterOp)
from paddle.distributed.fleet.meta_parallel import (ColumnParallelLinear,
                                                    RowParallelLinear,
                                                    VocabParallelEmbedding)

from tinygpt_paddle import BATCH, HEADS, VOCAB, WIDTH, TinyGPT, batch, loss_fn

STEPS, LR = 3, 3e-3
calls = {"forward": [], "backward": []}   # by-hand collectives: (name, bytes, ranks)


# --- Megatron's conjugate operators ---------------------------------------------------
class Copy(PyLayer):
    """f: the identity forward; backward, each rank's gradient is only the part its
    columns of the next weight caused: all-reduce to add them up."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        calls["backward"].append(("all_reduce", grad.numel().item() * 4,
                                  dist.get_world_size()))
        dist.all_reduce(grad)
        return grad


class Reduce(PyLayer):
    """g: forward, each rank holds a partial sum of the output: all-reduce it; backward,
    the gradient of a sum reaches every summand whole: the identity."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        calls["forward"].append(("all_reduce", x.numel().item() * 4,
                                 dist.get_world_size()))
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ColumnParallel(nn.Layer):
    """This rank's output features of `full`: f, then (b, s, in) @ (in, out/tp)."""

    def __init__(self, full: nn.Linear, cols) -> None:
        super().__init__()
        self.weight = self.create_parameter(full.weight[:, cols].shape)
        self.weight.set_value(full.weight[:, cols])
        self.bias = None
        if full.bias is not None:
            self.bias = self.create_parameter(full.bias[cols].shape, is_bias=True)
            self.bias.set_value(full.bias[cols])

    def forward(self, x):
        return F.linear(Copy.apply(x), self.weight, self.bias)


class RowParallel(nn.Layer):
    """This rank's input features of `full`: (b, s, in/tp) @ (in/tp, out), then g; the
    bias is added once, after the sum."""

    def __init__(self, full: nn.Linear, rows) -> None:
        super().__init__()
        self.weight = self.create_parameter(full.weight[rows].shape)
        self.weight.set_value(full.weight[rows])
        self.bias = self.create_parameter(full.bias.shape, is_bias=True)
        self.bias.set_value(full.bias)

    def forward(self, x):
        return Reduce.apply(F.linear(x, self.weight)) + self.bias


def head_cols(rank: int, tp: int) -> paddle.Tensor:
    """Columns of the fused q/k/v weight (WIDTH, 3*WIDTH) for this rank's HEADS/tp
    heads: its queries, its keys, its values."""
    part = WIDTH // tp
    return paddle.concat([c * WIDTH + rank * part + paddle.arange(part)
                          for c in range(3)])


def mine_of(rank: int, part: int) -> paddle.Tensor:
    """Rank `rank`'s `part` features: the rank-th block of them."""
    return paddle.arange(rank * part, (rank + 1) * part)


def by_hand(model: TinyGPT, rank: int, tp: int) -> TinyGPT:
    part, hidden = WIDTH // tp, 4 * WIDTH // tp
    for block in model.blocks.values():
        block.qkv = ColumnParallel(block.qkv, head_cols(rank, tp))     # heads' q, k, v
        block.proj = RowParallel(block.proj, mine_of(rank, part))      # heads' outputs
        block.mlp[0] = ColumnParallel(block.mlp[0], mine_of(rank, hidden))
        block.mlp[2] = RowParallel(block.mlp[2], mine_of(rank, hidden))
    return model


# --- the same with fleet's layers ---------------------------------------------------
def with_fleet(model: TinyGPT, rank: int, tp: int) -> TinyGPT:
    """Fleet's layers build their own share of each weight: copy this rank's part of
    the one-process weights into them."""
    part, hidden = WIDTH // tp, 4 * WIDTH // tp
    for block in model.blocks.values():
        qkv = ColumnParallelLinear(WIDTH, 3 * WIDTH, has_bias=False,
                                   gather_output=False)
        qkv.weight.set_value(block.qkv.weight[:, head_cols(rank, tp)])
        proj = RowParallelLinear(WIDTH, WIDTH, has_bias=True, input_is_parallel=True)
        proj.weight.set_value(block.proj.weight[rank * part:(rank + 1) * part])
        proj.bias.set_value(block.proj.bias)
        up = ColumnParallelLinear(WIDTH, 4 * WIDTH, has_bias=True, gather_output=False)
        up.weight.set_value(block.mlp[0].weight[:, rank * hidden:(rank + 1) * hidden])
        up.bias.set_value(block.mlp[0].bias[rank * hidden:(rank + 1) * hidden])
        down = RowParallelLinear(4 * WIDTH, WIDTH, has_bias=True,
                                 input_is_parallel=True)
        down.weight.set_value(block.mlp[2].weight[rank * hidden:(rank + 1) * hidden])
        down.bias.set_value(block.mlp[2].bias)
        block.qkv, block.proj, block.mlp[0], block.mlp[2] = qkv, proj, up, down
    embed = VocabParallelEmbedding(VOCAB, WIDTH)        # rows: this rank's tokens
    rows = VOCAB // tp
    embed.weight.set_value(model.embed.weight[rank * rows:(rank + 1) * rows])
    model.embed = embed
    return model


def shard_of(ref: paddle.Tensor, mine: paddle.Tensor, name: str, rank: int, tp: int):
    """The part of the one-process tensor `ref` this rank's `mine` should equal."""
    if name.endswith("qkv.weight"):
        return paddle.index_select(ref, head_cols(rank, tp), axis=1)
    if list(mine.shape) == list(ref.shape):
        return ref
    axis = 0 if len(mine.shape) == 1 or mine.shape[-1] == ref.shape[-1] else 1
    n = mine.shape[axis]
    return paddle.slice(ref, [axis], [rank * n], [(rank + 1) * n])


def train(how: str, rank: int, tp: int) -> dict:
    model, reference = TinyGPT(), TinyGPT()
    split = by_hand if how == "by hand" else with_fleet
    model = split(model, rank, tp)
    opt = paddle.optimizer.Adam(learning_rate=LR, parameters=model.parameters())
    ref_opt = paddle.optimizer.Adam(learning_rate=LR, parameters=reference.parameters())
    weights = {p.data_ptr() for p in model.parameters()} | \
        {p.data_ptr() for p in reference.parameters()}
    saved, ref_saved = {}, {}

    def packer(into: dict):
        def pack(t):                       # autograd saves `t` for the backward pass
            if t.data_ptr() not in weights:  # a weight a product saves is no new memory
                into[t.data_ptr()] = t.numel().item() * t.element_size()
            return t
        return pack

    out = {}
    for k in range(STEPS):
        x, y = batch(k)
        calls["forward"].clear()
        calls["backward"].clear()
        with paddle.autograd.saved_tensors_hooks(packer(saved), lambda t: t):
            logits = model(x)
            loss = loss_fn(logits, y)
        loss.backward()
        with paddle.autograd.saved_tensors_hooks(packer(ref_saved), lambda t: t):
            ref_logits = reference(x)
            ref_loss = loss_fn(ref_logits, y)
        ref_loss.backward()
        if k == 0:
            ref_grads = dict(reference.named_parameters())
            out["logits_diff"] = float((logits - ref_logits).abs().max())
            out["grad_diff"] = max(
                float((p.grad - shard_of(ref_grads[n].grad, p, n, rank, tp))
                      .abs().max())
                for n, p in model.named_parameters())
            out["collectives"] = {p: list(c) for p, c in calls.items()}
            out["activations"] = sum(saved.values())
            out["ref_activations"] = sum(ref_saved.values())
        opt.step()
        opt.clear_grad()
        ref_opt.step()
        ref_opt.clear_grad()
        saved.clear()
        ref_saved.clear()
    ref = dict(reference.named_parameters())
    out["weight_diff"] = max(float((p - shard_of(ref[n], p, n, rank, tp)).abs().max())
                             for n, p in model.named_parameters())
    start = dict(TinyGPT().named_parameters())
    out["moved"] = max(float((p - start[n]).abs().max()) for n, p in ref.items())
    worst = paddle.to_tensor([out["logits_diff"], out["grad_diff"], out["weight_diff"]])
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    out["logits_diff"], out["grad_diff"], out["weight_diff"] = worst.tolist()
    out["params"] = sum(p.numel().item() * 4 for p in model.parameters())
    out["ref_params"] = sum(p.numel().item() * 4 for p in reference.parameters())
    return {"how": how, "tp": tp, **out}


def whole(t: paddle.Tensor) -> paddle.Tensor:
    """A dist tensor gathered whole on this rank (a plain tensor as it is)."""
    if not t.is_dist():
        return t
    return dist.reshard(t, t.process_mesh, [dist.Replicate()])._local_value()


def train_auto(tp: int) -> dict:
    """The auto-parallel API: a plan of ColWiseParallel / RowWiseParallel by layer name,
    applied by dist.parallelize on a 1-D mesh. Its tensors keep their global shapes
    (Paddle reshards where the plan needs it), so the q/k/v columns need no regrouping."""
    mesh = dist.ProcessMesh(list(range(tp)), dim_names=["mp"])
    plan = {}
    for i in range(len(TinyGPT().blocks)):
        plan |= {f"blocks.{i}.qkv": dist.ColWiseParallel(),
                 f"blocks.{i}.proj": dist.RowWiseParallel(),
                 f"blocks.{i}.mlp.0": dist.ColWiseParallel(),
                 f"blocks.{i}.mlp.2": dist.RowWiseParallel()}
    model, reference = TinyGPT(), TinyGPT()
    # (parallelize takes AdamW or SGD; AdamW without decay is Adam)
    opt = paddle.optimizer.AdamW(learning_rate=LR, weight_decay=0.0,
                                 parameters=model.parameters())
    model, opt = dist.parallelize(model, opt, mesh=mesh,
                                  config={"mp_config": {"parallelize_plan": plan}})
    ref_opt = paddle.optimizer.AdamW(learning_rate=LR, weight_decay=0.0,
                                     parameters=reference.parameters())
    out = {}
    for k in range(STEPS):
        x, y = batch(k)
        logits = model(x)
        loss_fn(logits, y).backward()
        ref_logits = reference(x)
        loss_fn(ref_logits, y).backward()
        if k == 0:
            out["logits_diff"] = float((whole(logits) - ref_logits).abs().max())
        opt.step()
        opt.clear_grad()
        ref_opt.step()
        ref_opt.clear_grad()
    ref = dict(reference.named_parameters())
    out["weight_diff"] = max(float((whole(p) - ref[n]).abs().max())
                             for n, p in model.named_parameters())
    start = dict(TinyGPT().named_parameters())
    out["moved"] = max(float((p - start[n]).abs().max()) for n, p in ref.items())
    out["params"] = sum((p._local_value() if p.is_dist() else p).numel().item() * 4
                        for p in model.parameters())
    out["ref_params"] = sum(p.numel().item() * 4 for p in reference.parameters())
    return {"how": "auto", "tp": tp, **out}


def sequence_parallel_mlp(tp: int) -> dict:
    """Fleet's sequence-parallel linears on the first block's MLP, against the whole
    MLP in one process (fleet's SP layers take the sequence first: (s, b, h))."""
    whole = TinyGPT().blocks["0"].mlp
    rank, hidden = dist.get_rank(), 4 * WIDTH // tp
    up = ColumnSequenceParallelLinear(WIDTH, 4 * WIDTH, has_bias=True,
                                      gather_output=False)
    up.weight.set_value(whole[0].weight[:, rank * hidden:(rank + 1) * hidden])
    up.bias.set_value(whole[0].bias[rank * hidden:(rank + 1) * hidden])
    down = RowSequenceParallelLinear(4 * WIDTH, WIDTH, has_bias=True,
                                     input_is_parallel=True)
    down.weight.set_value(whole[2].weight[rank * hidden:(rank + 1) * hidden])
    down.bias.set_value(whole[2].bias)
    x = batch(0)[0].astype("float32")[:, :, None].tile([1, 1, WIDTH]) / 100
    x = x.transpose([1, 0, 2]).contiguous()              # (s, b, h)
    mine = ScatterOp.apply(x).contiguous()               # (s/tp, b, h)
    y = GatherOp.apply(down(F.gelu(up(mine))))           # (s, b, h)
    return {"how": "fleet SP", "tp": tp,
            "output_diff": float((y - whole(x)).abs().max())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    paddle.set_device(args.device)
    tp = dist.get_world_size()
    assert HEADS % tp == 0 and BATCH, "the heads must split evenly over the ranks"
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": tp, "pp_degree": 1}
    fleet.init(is_collective=True, strategy=strategy)
    rank = dist.get_rank()
    runs, errors = [], {}
    for how in ("by hand", "fleet"):
        try:
            runs.append(train(how, rank, tp))
        except Exception as e:      # what fleet says where it does not run on CPU
            errors[how] = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
    try:
        auto = train_auto(tp)
    except Exception as e:
        auto = None
        errors["auto"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
    try:
        mlp = sequence_parallel_mlp(tp)
    except Exception as e:
        mlp = None
        errors["fleet SP"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
    if rank == 0:
        print(f"TinyGPT on {tp} ranks ({args.device}), {STEPS} Adam steps, each beside "
              "the one-process model:")
        for r in runs:
            ops = {p: [c[0] for c in calls] for p, calls in r["collectives"].items()}
            print(f"  {r['how']:<8} tp {r['tp']}: logits {r['logits_diff']:.0e}, grads "
                  f"{r['grad_diff']:.0e}, weights {r['weight_diff']:.0e} from one "
                  f"process\n    (training moved them {r['moved']:.0e}); per rank "
                  f"{r['params'] / 2**10:.0f} KiB parameters\n    (one process: "
                  f"{r['ref_params'] / 2**10:.0f}), {r['activations'] / 2**10:.0f} KiB "
                  "activations")
            if r["how"] == "by hand":
                for phase, names in ops.items():
                    print(f"    {phase:<8} {len(names)} all-reduces")
        if auto is not None:
            print(f"  auto     tp {tp}: logits {auto['logits_diff']:.0e}, weights "
                  f"{auto['weight_diff']:.0e} from one process\n    (training moved them "
                  f"{auto['moved']:.0e}); per rank {auto['params'] / 2**10:.0f} KiB "
                  "parameters")
        if mlp is not None:
            print(f"  fleet SP tp {tp}, one MLP: output {mlp['output_diff']:.0e} from "
                  "one process")
        for how, e in errors.items():   # a framework's message: wrapped to the page
            print(textwrap.fill(f"  {how}: {e}", 88, subsequent_indent="    "))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": tp, "runs": runs, "errors": errors,
                           "auto": auto, "sp_mlp": mlp}, f)


if __name__ == "__main__":
    main()
