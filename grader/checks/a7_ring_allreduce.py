"""Assignment 7: a ring all-reduce from send and receive, on gloo ranks.

The student writes ``ring_all_reduce(x, rank, world_size)`` with ``dist.send`` /
``dist.recv`` (or ``isend`` / ``irecv``) of ``torch.distributed`` or ``paddle.distributed``,
and returns the sum over ranks of ``x`` (or leaves it in ``x``). The checks run it on 2 or 3
ranks with :func:`grader.ranks.relay.run_ranks` and compare values and messages, never times.
Each rank's code runs alone (in a sandbox of its own when graded) with a stand-in ``dist``
whose every call a trusted relay performs on gloo and counts, so the counts below are the
relays', not the student's process's; its input comes from a new random draw each run, so
the sum cannot be had without communicating:

- the result equals ``all_reduce``'s on every rank (3 points; 1 of them for a correct
  reduce-scatter alone, which is what forgetting the all-gather phase leaves);
- only point-to-point calls were used: no collective did the work (1 point);
- the traffic is a ring's: each rank sends only to one neighbour, ``2 (p - 1)`` messages,
  ``2 (p - 1) L`` elements over all ranks for a tensor of ``L`` elements (2 points).

PyTorch submissions run on 3 ranks with 10 elements (chunks of 4, 3 and 3). Paddle ones run
on 2 ranks with 7 elements: with Paddle 3.3.1, gloo ``send``/``recv`` among 3 CPU ranks timed
out inside gloo (``unbound_buffer.cc:80 TIMEOUT``) even for a schedule that completes with
PyTorch, while 2 ranks work.

A deadlock (every rank sends first with a blocking send) ends at the ranks' timeout (counted
from when they are ready) with a message that says so, never a hang.

Functions defined in a notebook (or living in the student's kernel, when graded) travel to
the ranks as their source, under a short preamble that imports the framework and ``dist``.
``ring_all_reduce`` must therefore be self-contained: helpers go inside it.

This module holds what a student's notebook may import (the public checks and what
they share with the hidden ones); the graded checks are the course's, in
``exercises/hidden/a7_ring_allreduce.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

import hashlib
import secrets
import sys
import textwrap
from typing import Callable

import numpy as np

from ..lab.core.launch import RankFailed, RankTimeout
from ..ranks.relay import run_ranks
from .result import CheckResult

__all__ = ["run_ring", "public_ring_all_reduce", "PREAMBLE", "TIMEOUT_S", "WORLD"]

TIMEOUT_S = 25.0       # a correct run takes a few seconds; this only bounds a deadlock
RTOL, ATOL = 1e-5, 1e-5
PREAMBLE = {
    "torch": "import numpy as np\nimport torch\nimport torch.distributed as dist\n",
    "paddle": "import numpy as np\nimport paddle\nimport paddle.distributed as dist\n",
}
WORLD = {"torch": 3, "paddle": 2}


def _inputs(world: int, length: int, seed: int) -> list[np.ndarray]:
    return [np.random.default_rng(seed + r).standard_normal(length).astype(np.float32)
            for r in range(world)]


def _program(fn: Callable, framework: str) -> dict:
    """What the ranks run: an importable function by name, any other (a notebook's, or one
    in the student's kernel, graded by the judge) as its source under the preamble."""
    from ..grading.judge.channel import KernelObject, source_of

    if not isinstance(fn, KernelObject) and getattr(fn, "__module__", "") not in ("__main__", None):
        mod = sys.modules.get(fn.__module__)
        if mod is not None and getattr(mod, "__file__", None):
            return {"module": fn.__module__, "name": fn.__name__}   # tests, modules
    try:
        src = textwrap.dedent(source_of(fn))
    except (OSError, TypeError, NameError) as exc:
        raise ValueError(f"cannot read the source of {fn!r}: {exc}") from exc
    code = PREAMBLE[framework] + "\n" + src
    module = "a7_student_" + hashlib.sha1(code.encode()).hexdigest()[:12]
    return {"module": module, "name": fn.__name__, "source": code}


def run_ring(fn: Callable, world: int, length: int, framework: str = "torch",
             seed: int | None = None, timeout: float = TIMEOUT_S) -> list[dict] | str:
    """Run ``fn`` on ``world`` ranks; the ranks' logs, or a string saying what went wrong.
    The inputs come from a new random ``seed`` each run (a rank sees only its own), so the
    sum can only be had by communicating, and the relays count every message."""
    try:
        program = _program(fn, framework)
    except ValueError as exc:
        return str(exc)
    seed = secrets.randbits(31) if seed is None else seed
    try:
        logs = run_ranks(program, _inputs(world, length, seed), framework, timeout)
    except RankTimeout as exc:
        return (f"deadlock: rank(s) {exc.ranks} were still waiting after {timeout:.0f} s and were "
                "stopped")
    except RankFailed as exc:
        return f"rank {exc.rank} failed: {exc.last_error_line()}"
    for rank, log in enumerate(logs):
        if "error" in log:
            return f"rank {rank} raised: {log['error'].splitlines()[0]}"
    # the sum all_reduce would give, computed here from the known inputs, not by a rank
    inputs = _inputs(world, length, seed)
    expected = np.sum(np.stack(inputs), axis=0, dtype=np.float32)
    for rank, log in enumerate(logs):
        if not isinstance(log, dict) or not isinstance(log.get("got"), np.ndarray):
            return "a rank returned something that is not its result"
        log["forbidden"] = log["collectives"]
        log["expected"] = expected
        log["input"] = inputs[rank]     # what this rank was given (a hint can replay it)
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
    wrong = [r for r, log in enumerate(logs)
             if not np.allclose(log["got"], log["expected"], rtol=RTOL, atol=ATOL)]
    if wrong:
        return CheckResult(name, 0, 1, f"rank(s) {wrong} do not hold the sum of both ranks' x",
                           expected="every rank holds x of rank 0 + x of rank 1",
                           seen=f"rank(s) {wrong} differ", hint="after the reduce-scatter, the "
                           "all-gather passes the finished chunks on (see its index rule above)",
                           advisory=True)
    return CheckResult(name, 1, 1, "runs on 2 ranks and every rank holds the sum (graded: 3 "
                       "ranks, uneven chunks, and the messages)")


