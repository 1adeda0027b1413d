"""Assignment 7: a ring all-reduce from send and receive, on gloo ranks.

The student writes ``ring_all_reduce(x, rank, world_size)`` with ``dist.send`` /
``dist.recv`` (or ``isend`` / ``irecv``) of ``torch.distributed`` or ``paddle.distributed``,
and returns the sum over ranks of ``x`` (or leaves it in ``x``). The checks run it on 2 or 3
ranks with :func:`grader.lab.relay.run_ranks` and compare values and messages, never times.
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

A deadlock (every rank sends first with a blocking send) ends at the launcher's timeout
with a message that says so, never a hang.

Functions defined in a notebook (or living in the student's kernel, when graded) travel to
the ranks as their source, under a short preamble that imports the framework and ``dist``.
``ring_all_reduce`` must therefore be self-contained: helpers go inside it.
"""
from __future__ import annotations

import hashlib
import secrets
import sys
import textwrap
from typing import Callable

import numpy as np

from ..lab.launch import RankFailed, RankTimeout
from ..lab.relay import run_ranks
from .result import CheckResult

__all__ = ["run_ring", "check_ring_all_reduce", "public_ring_all_reduce", "grade", "PREAMBLE",
           "TIMEOUT_S"]

TIMEOUT_S = 25.0       # a correct run takes a few seconds; this only bounds a deadlock
RTOL, ATOL = 1e-5, 1e-5
FORBIDDEN = ("all_reduce", "reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
             "scatter", "gather", "alltoall")
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
    from ..grading.remote import KernelObject, source_of

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
        lines = [l for l in exc.detail.splitlines() if l.strip() and not l.startswith("---")]
        last = next((l for l in reversed(lines) if "Error" in l or "Exception" in l), lines[-1] if lines else "")
        return f"rank {exc.rank} failed: {last.strip()}"
    for rank, log in enumerate(logs):
        if "error" in log:
            return f"rank {rank} raised: {log['error'].splitlines()[0]}"
    # the sum all_reduce would give, computed here from the known inputs, not by a rank
    expected = np.sum(np.stack(_inputs(world, length, seed)), axis=0, dtype=np.float32)
    for log in logs:
        if not isinstance(log, dict) or not isinstance(log.get("got"), np.ndarray):
            return "a rank returned something that is not its result"
        log["forbidden"] = log["collectives"]
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


def check_ring_all_reduce(fn: Callable, framework: str = "torch", world: int | None = None,
                          length: int | None = None) -> list[CheckResult]:
    """The three graded parts (see the module docstring), from one run on ``world`` ranks
    (default: 3 ranks and 10 elements for PyTorch, 2 ranks and 7 elements for Paddle)."""
    world = world or WORLD[framework]
    length = length or {2: 7, 3: 10}.get(world, 3 * world + 1)
    names = ("a7: the result equals all_reduce's on every rank",
             "a7: only send and receive did the communication",
             "a7: the traffic is a ring's")
    logs = run_ring(fn, world, length, framework)
    if isinstance(logs, str):
        hint = _DEADLOCK_HINT if logs.startswith("deadlock") else "run it in the notebook"
        return [CheckResult(n, 0, p, logs, expected=f"all {world} ranks finish", hint=hint)
                for n, p in zip(names, (3, 1, 2))]
    return [_check_values(names[0], logs, world, length), _check_p2p(names[1], logs),
            _check_ring(names[2], logs, world, length)]


def _check_values(name: str, logs: list[dict], world: int, length: int) -> CheckResult:
    used = sorted({op for log in logs for op in log["forbidden"]})
    if used:
        return CheckResult(name, 0, 3, "not compared: a collective did the work",
                           expected="send / recv only", seen=f"called {used}",
                           hint="build the all-reduce from dist.send and dist.recv")
    expected = logs[0]["expected"]
    ok = [np.isclose(log["got"], expected, rtol=RTOL, atol=ATOL) if log["got"].shape == expected.shape
          else np.zeros(length, bool) for log in logs]
    if all(m.all() for m in ok):
        return CheckResult(name, 3, 3, f"{world} ranks x {length} elements (uneven chunks) "
                           f"match all_reduce (rtol {RTOL:g})")
    wrong = {r: np.flatnonzero(~m).tolist() for r, m in enumerate(ok) if not m.all()}
    seen = "; ".join(f"rank {r}: elements {v} differ" for r, v in wrong.items())
    if np.logical_or.reduce(ok).all():
        share = [int(m.sum()) for m in ok]
        return CheckResult(name, 1, 3, "each element's sum is on one rank only: a correct "
                           "reduce-scatter, without the all-gather phase",
                           expected="every rank holds the whole sum", seen=f"correct elements per rank: {share}",
                           hint="after p - 1 reduce-scatter steps, run p - 1 more steps that "
                                "pass the finished chunks around the ring (copy, don't add)")
    return CheckResult(name, 0, 3, "the sums are wrong", expected="all_reduce's values on every rank",
                       seen=seen, hint="in step s rank r sends chunk (r - s) mod p and adds what it "
                                       "receives into chunk (r - s - 1) mod p; with L not a multiple "
                                       "of p the chunks have different sizes")


def _check_p2p(name: str, logs: list[dict]) -> CheckResult:
    used = sorted({op for log in logs for op in log["forbidden"]})
    sends = sum(len(log["sent_to"]) for log in logs)
    if used:
        return CheckResult(name, 0, 1, "a collective was called", expected="send / recv only",
                           seen=f"called {used}", hint="the exercise is to build it from send and recv")
    if not sends:
        return CheckResult(name, 0, 1, "no message was sent", expected="send / recv between ranks",
                           seen="0 sends", hint="each rank must send its chunks to its neighbour")
    return CheckResult(name, 1, 1, f"{sends} point-to-point messages, no collective")


def _check_ring(name: str, logs: list[dict], world: int, length: int) -> CheckResult:
    if any(log["forbidden"] for log in logs):
        return CheckResult(name, 0, 2, "not a ring: a collective was called", hint="send / recv only")
    peers = [sorted(set(log["sent_to"])) for log in logs]
    msgs = [len(log["sent_to"]) for log in logs]
    elems = sum(log["sent_elems"] for log in logs)
    want_msgs, want_elems = 2 * (world - 1), 2 * (world - 1) * length
    neighbour = all(p == [(r + 1) % world] for r, p in enumerate(peers)) or \
        all(p == [(r - 1) % world] for r, p in enumerate(peers))
    seen = f"ranks sent to {peers}; messages per rank {msgs}; {elems} elements in all"
    if neighbour and all(m == want_msgs for m in msgs) and elems == want_elems:
        return CheckResult(name, 2, 2, seen)
    return CheckResult(name, 0, 2, "the messages do not follow a ring",
                       expected=f"each rank sends only to its neighbour, {want_msgs} messages of "
                                f"one chunk each: {want_elems} elements in all (L = {length}, p = {world})",
                       seen=seen, hint="send one chunk per step, not the whole tensor, and only to "
                                       "rank (r + 1) mod p")


def grade(fn: Callable, framework: str = "torch") -> list[CheckResult]:
    return check_ring_all_reduce(fn, framework)
