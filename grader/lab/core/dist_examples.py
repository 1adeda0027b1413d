"""Small rank functions used by the launcher's tests and the chapters' first examples."""
from __future__ import annotations

import os
import time
from typing import Any


def allreduce_rank(rank: int, world: int) -> list[float]:
    """Each rank contributes ``rank + 1``; every rank gets the sum."""
    framework = os.environ["COURSE_FRAMEWORK"]
    if framework == "torch":
        import torch
        import torch.distributed as dist

        x = torch.full((4,), float(rank + 1))
        dist.all_reduce(x)
        return x.tolist()
    import paddle
    import paddle.distributed as dist

    x = paddle.full([4], float(rank + 1), dtype="float32")
    dist.all_reduce(x)
    return x.numpy().tolist()


def fail_on_rank(rank: int, world: int, bad: int) -> int:
    """Rank ``bad`` raises (``launch`` starts ``fn`` once every rank has joined the group)."""
    if rank == bad:
        raise ValueError(f"rank {rank} was told to fail")
    return rank


def hang_on_rank(rank: int, world: int, bad: int) -> Any:
    """Rank ``bad`` never joins the collective the others wait in: a classic hang."""
    if rank == bad:
        time.sleep(3600)
    return allreduce_rank(rank, world)


def exit_on_rank(rank: int, world: int, bad: int) -> int:
    """Rank ``bad`` ends its process with code 3."""
    if rank == bad:
        os._exit(3)
    return rank
