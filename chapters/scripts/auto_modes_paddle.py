"""Paddle's modes beyond the dynamic semi-automatic API, tried on the ranks at hand:

1. ``dist.to_static``: the semi-automatic plan (``shard_layer``) compiled to a static
   distributed program, trained by the returned ``DistModel``;
2. ``dist.to_distributed``: the automatic API of the dynamic graph, which picks a mesh
   and the placements for a model that has none;
3. the static ``Engine`` with ``strategy.auto_mode = "full_random"``: the fully
   automatic mode, which searches the placements.

    python -m paddle.distributed.launch --nproc_per_node 2 auto_modes_paddle.py
    python -m paddle.distributed.launch --gpus 0,1 auto_modes_paddle.py --device gpu

Each attempt prints what it did, or the error it stopped with. ``semi_auto_paddle.py
--modes`` runs ``try_all`` after its own work, in the same launch (a launch costs
seconds).
"""
import argparse
import traceback

import numpy as np
import paddle
import paddle.distributed as dist

DIMS, BATCH = (64, 128, 32), 32


class MLP(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        paddle.seed(0)
        self.fc1 = paddle.nn.Linear(DIMS[0], DIMS[1], bias_attr=False)
        self.fc2 = paddle.nn.Linear(DIMS[1], DIMS[2], bias_attr=False)

    def forward(self, x):
        return self.fc2(paddle.nn.functional.relu(self.fc1(x)))


class Data(paddle.io.Dataset):
    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self.x = rng.standard_normal((4 * BATCH, DIMS[0])).astype("float32")
        self.t = rng.standard_normal((4 * BATCH, DIMS[2])).astype("float32")

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.t[i]


def semi_auto_static(world: int):
    mesh = dist.ProcessMesh(list(range(world)), dim_names=["x"])

    def shard_fn(name, layer, mesh):
        if name == "fc1":
            layer.weight = dist.shard_tensor(layer.weight, mesh, [dist.Shard(1)])
        elif name == "fc2":
            layer.weight = dist.shard_tensor(layer.weight, mesh, [dist.Shard(0)])

    model = dist.shard_layer(MLP(), mesh, shard_fn)
    opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    loader = dist.shard_dataloader(paddle.io.DataLoader(Data(), batch_size=BATCH),
                                   meshes=[mesh])
    dist_model = dist.to_static(model, loader, paddle.nn.MSELoss(), opt)
    dist_model.train()
    losses = [float(dist_model(x, t)) for x, t in loader()]
    return f"trained {len(losses)} steps, losses {np.round(losses, 4).tolist()}"


def automatic_dynamic(world: int):
    from paddle.distributed.auto_parallel.high_level_api import ToDistributedConfig

    model = MLP()
    opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    loader = paddle.io.DataLoader(Data(), batch_size=BATCH)
    config = ToDistributedConfig()    # the shape of the model's input
    config.input_spec = [paddle.static.InputSpec([BATCH, DIMS[0]], "float32", "x")]
    model, opt, loader = dist.to_distributed(model, opt, loader, device_num=world,
                                             config=config)
    return f"fc1's weight placed {model.fc1.weight.placements}"


def fully_automatic(world: int):
    from paddle.distributed.fleet import auto

    strategy = auto.Strategy()
    strategy.auto_mode = "full_random"
    model = MLP()
    opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    engine = auto.Engine(model, paddle.nn.MSELoss(), opt, strategy=strategy)
    engine.fit(Data(), epochs=1, batch_size=BATCH, verbose=0)
    return "trained one epoch"


def try_all(world: int) -> None:
    """Each mode in turn; rank 0 prints what happened."""
    # dist.to_static last: after it fails, the others crash in the same process
    for name, attempt in (("dist.to_distributed", automatic_dynamic),
                          ('Engine, auto_mode="full_random"', fully_automatic),
                          ("dist.to_static", semi_auto_static)):
        try:
            outcome = attempt(world)
        except Exception as e:   # what a reader would see: the error, where it rose
            where = traceback.extract_tb(e.__traceback__)[-1]
            message = (str(e).strip().splitlines() or [""])[0][:160]
            source = where.filename.split("site-packages/")[-1]
            outcome = (f"stopped: {type(e).__name__}: {message}\n{'':>34}(raised in "
                       f"{source}, line {where.lineno}, {where.name})")
        if dist.get_rank() == 0:
            print(f"{name:<33} {outcome}", flush=True)
        paddle.disable_static()   # a failed Engine leaves Paddle in static-graph mode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    paddle.set_device(args.device)
    try_all(dist.get_world_size())


if __name__ == "__main__":
    main()
