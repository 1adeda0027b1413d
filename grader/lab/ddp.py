"""Rank functions for multi-process data parallelism, run with :func:`grader.lab.launch`.

``train_rank`` trains the model of :mod:`grader.lab.dataparallel` on one shard of the
global batch per rank, wrapped in PyTorch's ``DistributedDataParallel`` or Paddle's
``paddle.DataParallel`` (one process per device; gradients all-reduced and averaged during
backward), and returns the parameters, the losses and the time of each step, so the
chapter and the tests can check that every rank ends with the same parameters and that
they match one process trained on the whole batch.

``launch`` starts the ranks the way ``torchrun`` / ``python -m paddle.distributed.launch``
would (environment variables, then ``init_process_group`` / ``init_parallel_env``); gloo
on CPUs, NCCL when every rank has a GPU. ``os.environ["COURSE_FRAMEWORK"]`` names the
framework inside a rank.
"""
from __future__ import annotations

import os
import time
import warnings
from typing import Any

import numpy as np

from .dataparallel import Problem, _bounds, _tensor, build_model, model_weights, mse, split_sizes

__all__ = ["train_rank", "bucket_timing_rank", "in_sequence", "in_one_process"]


def _rank_device(framework: str, rank: int, world: int) -> str:
    """A GPU per rank when every rank has one (NCCL, as ``launch`` decides); else the CPU."""
    from .backends import get_backend

    return f"gpu:{rank}" if get_backend(framework).gpu_count() >= world else "cpu"


def _shard(problem: Problem, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    sizes = split_sizes(len(problem.x), world)
    if len(sizes) != world or len(set(sizes)) != 1:
        # Each rank averages over its own rows and DDP averages over ranks: the result is the
        # mean over the global batch only when all shards have the same size.
        raise ValueError(f"batch {len(problem.x)} does not split evenly over {world} ranks")
    a, b = _bounds(sizes)[rank]
    return problem.x[a:b], problem.y[a:b]


def _wrap(framework: str, model: Any, **ddp_options: Any) -> Any:
    if framework == "torch":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, **ddp_options)
    import paddle

    return paddle.DataParallel(model, **ddp_options)


def train_rank(rank: int, world: int, problem: Problem, steps: int,
               timed_steps: int = 0) -> dict:
    """Train ``steps`` steps on this rank's shard (SGD, lr from ``problem``), then time
    ``timed_steps`` more on the same data if asked. Returns the canonical weights after the
    first ``steps`` steps, this rank's losses (over its own rows) and the step times."""
    framework = os.environ["COURSE_FRAMEWORK"]
    device = _rank_device(framework, rank, world)
    x_np, y_np = _shard(problem, rank, world)
    model = build_model(framework, problem.weights, device)
    ddp = _wrap(framework, model)
    x, y = _tensor(framework, x_np, device), _tensor(framework, y_np, device)
    if framework == "torch":
        import torch

        opt = torch.optim.SGD(model.parameters(), lr=problem.lr)
    else:
        import paddle

        opt = paddle.optimizer.SGD(learning_rate=problem.lr, parameters=model.parameters())

    from .backends import get_backend

    be = get_backend(framework)

    def one_step() -> float:
        loss = mse(ddp(x), y)          # mean over this rank's rows
        loss.backward()                # gradients all-reduced (averaged) across ranks here
        opt.step()
        if framework == "torch":
            opt.zero_grad(set_to_none=True)
        else:
            opt.clear_grad()
        return float(loss.item())

    losses = [one_step() for _ in range(steps)]
    weights = model_weights(framework, model)
    seconds = []
    for _ in range(timed_steps):
        be.synchronize(device if device != "cpu" else None)
        t0 = time.perf_counter()
        one_step()
        be.synchronize(device if device != "cpu" else None)
        seconds.append(time.perf_counter() - t0)
    return {"rank": rank, "weights": weights, "losses": losses, "step_seconds": seconds,
            "rows": len(x_np), "wrapper": type(ddp).__name__, "threads": be.get_num_threads()}


def bucket_timing_rank(rank: int, world: int, problem: Problem, bucket_cap_mb: float) -> dict:
    """PyTorch only: when does DDP start all-reducing a bucket, relative to backward?

    A communication hook (called by DDP the moment a bucket's gradients are all ready)
    records its clock; a tensor hook records when the *first* layer's weight gradient is
    computed, which autograd does last. A bucket whose all-reduce started before that moment
    was communicated while backward was still running. (On GPUs these are host clocks:
    the moments work was queued, not when the kernels ran.)
    """
    import torch
    import torch.distributed as dist

    x_np, y_np = _shard(problem, rank, world)
    device = _rank_device("torch", rank, world)
    model = build_model("torch", problem.weights, device)
    ddp = _wrap("torch", model, bucket_cap_mb=bucket_cap_mb)
    marks: dict[str, Any] = {"buckets": []}

    def hook(state: Any, bucket: Any) -> Any:
        marks["buckets"].append((bucket.index(), time.perf_counter_ns(),
                                 bucket.buffer().numel() * bucket.buffer().element_size()))
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0].div_(world))

    # DDP checks the hook's annotations; this module's are strings (postponed evaluation).
    hook.__annotations__ = {"state": object, "bucket": dist.GradBucket,
                            "return": torch.futures.Future[torch.Tensor]}
    ddp.register_comm_hook(None, hook)
    first_weight = next(model.parameters())
    first_weight.register_hook(lambda g: marks.__setitem__("first_layer_grad", time.perf_counter_ns()))
    x, y = _tensor("torch", x_np, device), _tensor("torch", y_np, device)
    for _ in range(3):  # DDP rebuilds its buckets after the first iteration; keep the last
        marks["buckets"].clear()
        loss = mse(ddp(x), y)
        t0 = time.perf_counter_ns()
        loss.backward()
        t1 = time.perf_counter_ns()
        model.zero_grad(set_to_none=True)
    return {"backward_start": t0, "backward_end": t1,
            "first_layer_grad": marks["first_layer_grad"], "buckets": marks["buckets"]}


def in_sequence(rank: int, world: int, calls: list) -> list:
    """Run several rank functions ``(fn, args)`` one after the other in the same ranks: one
    launch, so the processes start (and import their framework) once."""
    return [fn(rank, world, *args) for fn, args in calls]


def in_one_process(framework: str, problem: Problem, steps: int = 5, threads: int = 1) -> dict:
    """What the Paddle edition of d2l does: wrap the model in the data-parallel wrapper inside
    one ordinary process, with no launcher.

    PyTorch's DDP refuses (no process group); the error is returned. Paddle's wrapper warns
    and falls back to one device; the warning, the world size it sees and the time per step
    wrapped and unwrapped (``threads`` intra-op threads, median of 3 runs of ``steps``) are
    returned.
    """
    from .backends import get_backend

    be = get_backend(framework)
    if framework == "torch":
        from torch.nn.parallel import DistributedDataParallel

        try:
            DistributedDataParallel(build_model("torch", problem.weights))
        except (ValueError, RuntimeError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"error": None}
    import paddle
    import paddle.distributed as dist

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped = paddle.DataParallel(build_model("paddle", problem.weights))
    plain = build_model("paddle", problem.weights)
    x, y = _tensor("paddle", problem.x), _tensor("paddle", problem.y)
    opts = {id(m): paddle.optimizer.SGD(learning_rate=problem.lr, parameters=m.parameters())
            for m in (wrapped, plain)}

    def run(model: Any) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = mse(model(x), y)
            loss.backward()
            opts[id(model)].step()
            opts[id(model)].clear_grad()
        return (time.perf_counter() - t0) / steps

    before = be.get_num_threads()
    be.set_num_threads(threads)
    try:
        run(wrapped), run(plain)  # warm-up
        times: dict[str, list[float]] = {"wrapped": [], "plain": []}
        for _ in range(3):
            times["wrapped"].append(run(wrapped))
            times["plain"].append(run(plain))
    finally:
        be.set_num_threads(before)
    return {"error": None, "world_size": dist.get_world_size(), "wrapper": type(wrapped).__name__,
            "warnings": [str(w.message).strip() for w in caught],
            "wrapped_s": float(np.median(times["wrapped"])),
            "plain_s": float(np.median(times["plain"]))}
