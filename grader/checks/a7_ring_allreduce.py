"""Assignment 7: a ring all-reduce from send and receive, on gloo ranks.

The student writes ``ring_all_reduce(x, rank, world_size)`` with ``dist.send`` /
``dist.recv`` (or ``isend`` / ``irecv``) of ``torch.distributed`` or ``paddle.distributed``,
and returns the sum over ranks of ``x`` (or leaves it in ``x``). The checks run it on 2 or 3
ranks with :func:`grader.lab.launch` (gloo on CPU) and compare values and messages, never
times:

- the result equals ``all_reduce``'s on every rank (3 points; 1 of them for a correct
  reduce-scatter alone, which is what forgetting the all-gather phase leaves);
- only point-to-point calls were used: no collective did the work (1 point);
- the traffic is a ring's: each rank sends only to one neighbour, ``2 (p - 1)`` messages,
  ``2 (p - 1) L`` elements over all ranks for a tensor of ``L`` elements (2 points).

PyTorch submissions run on 3 ranks with 10 elements (chunks of 4, 3 and 3). Paddle ones run
on 2 ranks with 7 elements: with Paddle 3.3.1, gloo ``send``/``recv`` among 3 CPU ranks timed
out inside gloo (``unbound_buffer.cc:80 TIMEOUT``) even for a schedule that completes with
PyTorch, while 2 ranks work.

A deadlock (every rank sends first with a blocking send) ends at the launcher's timeout
with a message that says so, never a hang.

Functions defined in a notebook cannot be sent to ranks (they travel by name), so the
check writes the function's source, under a short preamble that imports the framework and
``dist``, into a temporary module the ranks import. ``ring_all_reduce`` must therefore be
self-contained: helpers go inside it.

This module holds what a student's notebook may import (the public checks and what
they share with the hidden ones); the graded checks are the course's, in
``exercises/hidden/a7_ring_allreduce.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

import hashlib
import importlib
import os
import sys
import tempfile
import textwrap
from typing import Any, Callable

import numpy as np

from ..lab.launch import RankFailed, RankTimeout, launch
from .result import CheckResult

__all__ = ["ring_rank", "run_ring", "public_ring_all_reduce", "PREAMBLE", "TIMEOUT_S", "WORLD"]

TIMEOUT_S = 25.0       # a correct run takes a few seconds; this only bounds a deadlock
RTOL, ATOL = 1e-5, 1e-5
FORBIDDEN = ("all_reduce", "reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
             "scatter", "gather", "alltoall")
PREAMBLE = {
    "torch": "import numpy as np\nimport torch\nimport torch.distributed as dist\n",
    "paddle": "import numpy as np\nimport paddle\nimport paddle.distributed as dist\n",
}
WORLD = {"torch": 3, "paddle": 2}
_MODULE_DIR = tempfile.mkdtemp(prefix="course-a7-")


def _inputs(world: int, length: int, seed: int) -> list[np.ndarray]:
    return [np.random.default_rng(seed + r).standard_normal(length).astype(np.float32)
            for r in range(world)]


def ring_rank(rank: int, world: int, module: str, name: str, length: int, seed: int) -> dict:
    """One rank: run the student's function with the point-to-point calls counted and the
    collectives recorded. The process runs student code, so what it returns is only data
    (``launch(..., safe_results=True)``) and the expected sum is computed by the caller."""
    framework = os.environ["COURSE_FRAMEWORK"]
    x_np = _inputs(world, length, seed)[rank]
    if framework == "torch":
        import torch
        import torch.distributed as dist

        wrap = torch.from_numpy
        numel = lambda t: int(t.numel())  # noqa: E731
    else:
        import paddle
        import paddle.distributed as dist

        wrap = paddle.to_tensor
        numel = lambda t: int(t.numel())  # noqa: E731
    log: dict[str, Any] = {"sent_to": [], "sent_elems": 0, "recvs": 0, "forbidden": []}

    def counted(op: Callable, is_send: bool) -> Callable:
        def call(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            peer = kwargs.get("dst", kwargs.get("src", args[0] if args else None))
            if is_send:
                log["sent_to"].append(int(peer))
                log["sent_elems"] += numel(tensor)
            else:
                log["recvs"] += 1
            return op(tensor, *args, **kwargs)
        return call

    def forbidden(op_name: str, op: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            log["forbidden"].append(op_name)
            return op(*args, **kwargs)
        return call

    for op_name in ("send", "isend"):
        setattr(dist, op_name, counted(getattr(dist, op_name), True))
    for op_name in ("recv", "irecv"):
        setattr(dist, op_name, counted(getattr(dist, op_name), False))
    for op_name in FORBIDDEN:
        if hasattr(dist, op_name):
            setattr(dist, op_name, forbidden(op_name, getattr(dist, op_name)))
    fn = getattr(importlib.import_module(module), name)
    x = wrap(x_np.copy())
    out = fn(x, rank, world)
    got = np.asarray((x if out is None else out).numpy(), dtype=np.float32).reshape(-1)
    return {"got": got, **log}


def _module_for(fn: Callable, framework: str) -> tuple[str, str]:
    # a function in the student's kernel, graded by the judge: its source comes as text
    from ..grading.remote import KernelObject, source_of

    if not isinstance(fn, KernelObject) and getattr(fn, "__module__", "") not in ("__main__", None) and not fn.__module__.startswith("a7_student_"):
        mod = sys.modules.get(fn.__module__)
        if mod is not None and getattr(mod, "__file__", None):
            return fn.__module__, fn.__name__   # already importable (tests, modules)
    try:
        src = textwrap.dedent(source_of(fn))
    except (OSError, TypeError, NameError) as exc:
        raise ValueError(f"cannot read the source of {fn!r}: {exc}") from exc
    code = PREAMBLE[framework] + "\n" + src
    module = "a7_student_" + hashlib.sha1(code.encode()).hexdigest()[:12]
    path = os.path.join(_MODULE_DIR, module + ".py")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(code)
    return module, fn.__name__


def run_ring(fn: Callable, world: int, length: int, framework: str = "torch", seed: int = 7,
             timeout: float = TIMEOUT_S) -> list[dict] | str:
    """Run ``fn`` on ``world`` ranks; the ranks' logs, or a string saying what went wrong."""
    try:
        module, name = _module_for(fn, framework)
    except ValueError as exc:
        return str(exc)
    if _MODULE_DIR not in sys.path:
        sys.path.insert(0, _MODULE_DIR)   # the ranks inherit this process's import path
    try:
        logs = list(launch(ring_rank, nprocs=world, framework=framework, timeout=timeout,
                           args=(module, name, length, seed), safe_results=True))
    except RankTimeout as exc:
        return (f"deadlock: rank(s) {exc.ranks} were still waiting after {timeout:.0f} s and were "
                "stopped")
    except RankFailed as exc:
        lines = [l for l in exc.detail.splitlines() if l.strip() and not l.startswith("---")]
        last = next((l for l in reversed(lines) if "Error" in l or "Exception" in l), lines[-1] if lines else "")
        return f"rank {exc.rank} raised: {last.strip()}"
    # the sum all_reduce would give, computed here from the known inputs, not by a rank
    expected = np.sum(np.stack(_inputs(world, length, seed)), axis=0, dtype=np.float32)
    for log in logs:
        if not isinstance(log, dict) or not isinstance(log.get("got"), np.ndarray):
            return "a rank returned something that is not its result"
        log["expected"] = expected
    return logs


_DEADLOCK_HINT = ("a blocking send waits for the matching receive: if every rank sends first, "
                  "none receives. Let even ranks send then receive and odd ranks receive then "
                  "send, or post dist.isend and then dist.recv and wait on the send")


def public_ring_all_reduce(fn: Callable, framework: str = "torch") -> CheckResult:
    """Lenient: it runs on 2 ranks without error or deadlock and returns the right shape."""
    name = "a7 (public): ring_all_reduce runs on 2 ranks"
    logs = run_ring(fn, 2, 6, framework)
    if isinstance(logs, str):
        return CheckResult(name, 0, 1, logs, expected="both ranks return",
                           hint=_DEADLOCK_HINT if logs.startswith("deadlock") else
                           "the line above is the rank's error")
    shapes = [log["got"].shape for log in logs]
    if any(s != (6,) for s in shapes):
        return CheckResult(name, 0, 1, "wrong shape", expected="(6,) on each rank", seen=str(shapes),
                           hint="return a tensor shaped like x (or reduce into x)")
    return CheckResult(name, 1, 1, "runs on 2 ranks and returns a tensor of x's shape")


