"""A two-layer MLP split over the ranks, Megatron-style (first layer by columns, second
by rows), trained next to an unsplit copy of itself: both must give the same weights.

    python -m paddle.distributed.launch --nproc_per_node 2 tp_mlp_paddle.py
    python -m paddle.distributed.launch --gpus 0,1 tp_mlp_paddle.py --device gpu

With the reshard functions' log on (see reshard_paddle.py), each rank's log shows the
collectives of the last step under the lines "== forward", "== backward" and
"== optimizer step" that this script prints.
"""
import argparse
import json
import os
import sys
import traceback

RESHARDS = ["s_to_r", "p_to_r", "r_to_s", "s_to_s", "p_to_s", "r_to_p", "s_to_p"]
os.environ["GLOG_vmodule"] = ",".join(f"{f}_reshard_function=4" for f in RESHARDS)
os.environ["GLOG_minloglevel"] = "0"

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402

DIMS, BATCH, STEPS, LR = (64, 128, 32), 32, 5, 0.1


class MLP(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        paddle.seed(0)   # the same initial weights on every rank
        self.fc1 = paddle.nn.Linear(DIMS[0], DIMS[1], bias_attr=False)
        self.fc2 = paddle.nn.Linear(DIMS[1], DIMS[2], bias_attr=False)

    def forward(self, x):
        return self.fc2(paddle.nn.functional.relu(self.fc1(x)))


def shard_fn(name, layer, mesh):
    # paddle.nn.Linear keeps its weight as (in, out): a column split is Shard(1),
    # a row split Shard(0)
    if name == "fc1":
        layer.weight = dist.shard_tensor(layer.weight, mesh, [dist.Shard(1)])
    elif name == "fc2":
        layer.weight = dist.shard_tensor(layer.weight, mesh, [dist.Shard(0)])


def phase(name: str, last: bool) -> None:
    if last:     # mark the log: the collectives below this line belong to `name`
        sys.stderr.flush()
        print(f"== {name}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    paddle.set_device(args.device)
    world = dist.get_world_size()
    mesh = dist.ProcessMesh(list(range(world)), dim_names=["x"])

    reference = MLP()                  # the unsplit model, trained on this rank alone
    model = dist.shard_layer(MLP(), mesh, shard_fn)
    paddle.seed(1)                              # the same batch on every rank
    x, t = paddle.randn([BATCH, DIMS[0]]), paddle.randn([BATCH, DIMS[2]])
    xd = dist.shard_tensor(x, mesh, [dist.Replicate()])
    td = dist.shard_tensor(t, mesh, [dist.Replicate()])
    opt = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    ref_opt = paddle.optimizer.SGD(learning_rate=LR, parameters=reference.parameters())

    losses, ref_losses = [], []
    for step in range(STEPS):
        last = step == STEPS - 1
        phase("forward", last)
        loss = paddle.nn.functional.mse_loss(model(xd), td)
        phase("backward", last)
        loss.backward()
        phase("optimizer step", last)
        opt.step()
        opt.clear_grad()
        phase("end of step", last)
        ref_loss = paddle.nn.functional.mse_loss(reference(x), t)
        ref_loss.backward()
        ref_opt.step()
        ref_opt.clear_grad()
        losses.append(float(loss))
        ref_losses.append(float(ref_loss))

    pairs = [(model.fc1.weight, reference.fc1.weight),
             (model.fc2.weight, reference.fc2.weight)]
    full = [dist.reshard(w, mesh, [dist.Replicate()])._local_value() for w, _ in pairs]
    weight_diff = max(float((w - r).abs().max()) for w, (_, r) in zip(full, pairs))
    loss_diff = float(np.abs(np.subtract(losses, ref_losses)).max())
    if dist.get_rank() == 0:
        print(f"MLP {DIMS}, batch {BATCH}, {STEPS} SGD steps, float32, "
              f"{world} ranks on {args.device}")
        for name, (w, _) in zip(("first (column-wise)", "second (row-wise)"), pairs):
            print(f"  {name} layer: weight {w.shape} is {w.placements}, "
                  f"rank 0 holds {w._local_value().shape}")
        print("  losses, split  :", [round(v, 6) for v in losses])
        print("  losses, unsplit:", [round(v, 6) for v in ref_losses])
        print(f"  largest difference: loss {loss_diff:.1e}, weight {weight_diff:.1e}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "losses": losses, "ref_losses": ref_losses,
                           "loss_diff": loss_diff, "weight_diff": weight_diff,
                           "local_shapes": [w._local_value().shape for w, _ in pairs]},
                          f)


if __name__ == "__main__":
    # With the reshard log on, Paddle 3.3 corrupts its heap while the interpreter shuts
    # down ("corrupted size vs. prev_size") and the rank hangs: leave without teardown.
    status = 0
    try:
        main()
    except Exception:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
