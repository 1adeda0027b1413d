"""Hidden checks of assignment 7 (the public ones, and the rank runner they share:
``grader.checks.a7_ring_allreduce``)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from grader.checks.a7_ring_allreduce import ATOL, RTOL, WORLD, _DEADLOCK_HINT, run_ring
from grader.checks.result import CheckResult
from grader.grading.hidden import cases

__all__ = ["check_ring_all_reduce", "check_all"]


def check_ring_all_reduce(fn: Callable, framework: str = "torch", world: int | None = None,
                          length: int | None = None) -> list[CheckResult]:
    """The three graded parts (see the module docstring), from one run on ``world`` ranks
    (default: 3 ranks and 10 elements for PyTorch, 2 ranks and 7 elements for Paddle)."""
    world = world or WORLD[framework]
    length = length or {2: 7, 3: 10}.get(world, 3 * world + 1)
    names = ("a7: the result equals all_reduce's on every rank",
             "a7: only send and receive did the communication",
             "a7: the traffic is a ring's")
    # the course's draw (grader.grading.hidden.cases): the same on every run, so two
    # identical notebooks score the same
    seed = cases("a7_ring_allreduce", f"ring-{world}-{length}").randrange(2**31)
    logs = run_ring(fn, world, length, framework, seed=seed)
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
    if _all_gather_took_reduce_scatter_indices(logs):
        hint = ("the reduce-scatter is right, but the all-gather used its indices: in all-gather "
                "step s rank r sends chunk (r - s + 1) mod p (the one it finished or received "
                "last) and copies what it receives into chunk (r - s) mod p, one ahead of the "
                "reduce-scatter's (r - s) and (r - s - 1)")
    else:
        hint = ("reduce-scatter: in step s rank r sends chunk (r - s) mod p and adds what it "
                "receives into chunk (r - s - 1) mod p; all-gather: it sends chunk "
                "(r - s + 1) mod p and copies what it receives into chunk (r - s) mod p; with L "
                "not a multiple of p the chunks have different sizes")
    return CheckResult(name, 0, 3, "the sums are wrong", expected="all_reduce's values on every rank",
                       seen=seen, hint=hint)


def _replay(inputs: list[np.ndarray], sizes: list[int], gather_offset: int) -> list[np.ndarray]:
    """The ring on the host: a right reduce-scatter, then an all-gather whose indices are
    the right ones shifted back by ``gather_offset`` (1: the reduce-scatter's own)."""
    p = len(inputs)
    bounds = np.cumsum([0] + sizes)
    parts = [[x[bounds[i]:bounds[i + 1]].astype(np.float64) for i in range(p)] for x in inputs]
    for phase, offset in (("rs", 1), ("ag", gather_offset)):
        for s in range(p - 1):
            send = [(r - s - offset + 1) % p for r in range(p)]
            msgs = [parts[r][send[r]].copy() for r in range(p)]
            for r in range(p):
                i = send[(r - 1) % p]       # the chunk the left neighbour sent
                parts[r][i] = parts[r][i] + msgs[(r - 1) % p] if phase == "rs" else msgs[(r - 1) % p]
    return [np.concatenate(pp) for pp in parts]


def _all_gather_took_reduce_scatter_indices(logs: list[dict]) -> bool:
    """Whether every rank holds what an all-gather with the reduce-scatter's indices leaves
    (the mistake the instructions' "the same way" invited), for np.array_split's chunk sizes
    or torch.chunk's."""
    inputs = [log.get("input") for log in logs]
    if any(not isinstance(x, np.ndarray) for x in inputs):
        return False
    p, n = len(inputs), inputs[0].shape[0]
    even = -(-n // p)
    splits = {tuple(len(c) for c in np.array_split(np.arange(n), p)),
              tuple(min(even, max(0, n - i * even)) for i in range(p))}
    for sizes in splits:
        want = _replay(inputs, list(sizes), 1)
        if all(log["got"].shape == w.shape and np.allclose(log["got"], w, rtol=1e-4, atol=1e-4)
               for log, w in zip(logs, want)):
            return True
    return False


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
    if not neighbour:
        hint = "each rank sends only to its neighbour, rank (r + 1) mod p"
    elif all(m == world - 1 for m in msgs) and elems == want_elems // 2:
        hint = (f"only the reduce-scatter's {world - 1} messages per rank were sent: the "
                f"all-gather's {world - 1} more (one finished chunk each) are missing")
    elif elems > want_elems:
        hint = "send one chunk per step, not the whole tensor"
    else:
        hint = (f"{world - 1} steps of reduce-scatter, then {world - 1} of all-gather, one "
                "chunk sent per step")
    return CheckResult(name, 0, 2, "the messages do not follow a ring",
                       expected=f"each rank sends only to its neighbour, {want_msgs} messages of "
                                f"one chunk each: {want_elems} elements in all (L = {length}, p = {world})",
                       seen=seen, hint=hint)


def check_all(fn: Callable, framework: str = "torch") -> list[CheckResult]:
    return check_ring_all_reduce(fn, framework)
