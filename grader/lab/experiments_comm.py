"""Experiments of the chapter on overlapping computation with communication
(``chapters/communication.md``).

Two experiments:

- :func:`copy_overlap` (a GPU and its host): compute products on the GPU and copy each
  result to the host, three ways: run, then copy; ``non_blocking`` copies into pageable
  memory on the compute stream; ``non_blocking`` copies into pinned memory on a stream of
  their own that waits for each product's event. Every operation is clocked by device
  events. On the CPU it runs too (events are host clocks, there are no streams, nothing
  overlaps), which is what the tests exercise.
- :func:`comm_overlap_rank` (two ranks, gloo on CPU or NCCL on GPUs): compute chunks and
  all-reduce each chunk's "gradient" either after all compute or asynchronously as soon
  as the chunk is done, with host-clock timestamps that the chapter draws.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .backends import get_backend
from .timeline import Timeline

__all__ = ["COPY_MODES", "CopyRun", "copy_overlap", "nonblocking_read_trap",
           "comm_overlap_rank", "comm_timelines"]

COPY_MODES = ("run then copy", "non_blocking, pageable", "pinned, copy stream")


@dataclass
class CopyRun:
    mode: str
    total_s: float
    timeline: Timeline
    overlap_s: float
    correct: bool


def copy_overlap(framework: str, spec: str, data: np.ndarray, products: int,
                 mode: str) -> CopyRun:
    """Products on ``spec``, each result copied to the host, the way ``mode`` says.

    ``total_s`` is the wall time from the first queued product until every copy is on the
    host (synchronized). The timeline has a compute row and a copy row, clocked by events.
    ``correct`` says whether every host copy equals the device result it copied.
    """
    if mode not in COPY_MODES:
        raise ValueError(f"mode {mode!r} not one of {COPY_MODES}")
    be = get_backend(framework)
    x = be.from_numpy(data, spec)
    be.matmul(x, x)
    be.synchronize(spec)  # warm-up
    compute = be.current_stream(spec)
    copy_stream = be.new_stream(spec) if mode == "pinned, copy stream" else compute
    marks: list[tuple[str, str, Any, Any]] = []  # (row, label, start event, end event)
    ys, hosts = [], []
    origin = be.Event(spec).record(compute)
    t0 = time.perf_counter()
    for i in range(products):
        s, e = be.Event(spec).record(compute), None
        y = be.matmul(x, x)
        e = be.Event(spec).record(compute)
        marks.append(("compute", f"product {i}", s, e))
        ys.append(y)
        if mode == "run then copy":
            continue
        with be.use_stream(copy_stream):
            be.wait_event(copy_stream, e)  # the copy of y[i] may start once y[i] exists
            cs = be.Event(spec).record(copy_stream)
            hosts.append(be.to_host(y, pinned=(mode == "pinned, copy stream"), non_blocking=True))
            ce = be.Event(spec).record(copy_stream)
        marks.append(("copy", f"copy {i}", cs, ce))
    if mode == "run then copy":
        be.synchronize(spec)
        for i, y in enumerate(ys):
            cs = be.Event(spec).record(compute)
            hosts.append(be.to_host(y))
            marks.append(("copy", f"copy {i}", cs, be.Event(spec).record(compute)))
    be.synchronize(spec)
    total = time.perf_counter() - t0
    tl = Timeline(f"{be.LABEL}: {mode}")
    for row, label, s, e in marks:
        a, b = origin.elapsed_ms(s) / 1e3, origin.elapsed_ms(e) / 1e3
        tl.add(row, a, max(a, b), "compute" if row == "compute" else "copy", label)
    correct = all(np.array_equal(be.to_numpy(h), be.to_numpy(y)) for h, y in zip(hosts, ys))
    return CopyRun(mode, total, tl, tl.overlap("compute", "copy"), correct)


def nonblocking_read_trap(framework: str, spec: str, data: np.ndarray, products: int = 4) -> dict:
    """Read a ``non_blocking`` device-to-host copy before and after synchronizing.

    On a GPU the copy is queued behind ``products`` products, so a read right away sees
    the destination buffer before the data arrived. On a CPU the copy is done when the
    call returns and both reads agree.
    """
    be = get_backend(framework)
    x = be.from_numpy(data, spec)
    be.synchronize(spec)
    y = x
    for _ in range(products):
        y = be.matmul(y, x) * (1.0 / data.shape[0])  # a chain: y depends on every product
    host = be.to_host(y, pinned=True, non_blocking=True)
    early = be.to_numpy(host).copy()  # read before synchronize: the trap
    be.synchronize(spec)
    late = be.to_numpy(host).copy()
    truth = be.to_numpy(y)
    return {"early_matches": bool(np.array_equal(early, truth)),
            "late_matches": bool(np.array_equal(late, truth)),
            "early_max_abs_diff": float(np.max(np.abs(early - truth)))}


def comm_overlap_rank(rank: int, world: int, n: int, chunks: int, numel: int) -> dict:
    """Run on each rank by :func:`grader.lab.launch`.

    Each chunk is one product of an ``n x n`` matrix (the "backward pass" of one layer)
    followed by an all-reduce of a ``numel``-element "gradient". Two phases:
    ``sequential`` (all compute, then every all-reduce) and ``overlapped`` (each
    all-reduce issued asynchronously as soon as its chunk is done; one wait at the end).
    Returns the records ``(phase, row, kind, label, start_ns, end_ns)`` and checks that
    every all-reduce gave the right sum.
    """
    framework = os.environ["COURSE_FRAMEWORK"]
    rng = np.random.default_rng(rank)
    a = rng.standard_normal((n, n), dtype=np.float32)
    if framework == "torch":
        import torch
        import torch.distributed as dist

        x = torch.from_numpy(a)
        make = lambda i: torch.full((numel,), float(rank + 1 + i))  # noqa: E731
        barrier = dist.barrier
        comp_thread = torch.get_num_threads()
    else:
        import paddle
        import paddle.distributed as dist

        x = paddle.to_tensor(a, place=paddle.CPUPlace())
        make = lambda i: paddle.full([numel], float(rank + 1 + i), dtype="float32")  # noqa: E731
        barrier = dist.barrier
        comp_thread = get_backend("paddle").get_num_threads()

    def reduce_async(g: Any) -> tuple[Any, list[int]]:
        """Issue an all-reduce without waiting; the list gets its completion time."""
        done: list[int] = []
        if framework == "torch":
            work = dist.all_reduce(g, async_op=True)
            work.get_future().then(lambda f: done.append(time.perf_counter_ns()))
        else:
            work = dist.all_reduce(g, sync_op=False)
            if work.is_completed():  # gloo in Paddle finishes the op inside the call
                done.append(time.perf_counter_ns())
        return work, done

    # warm-up: the first collective and the first product pay their set-up costs
    dist.all_reduce(make(0))
    x @ x
    records: list[tuple] = []
    checks: list[bool] = []
    expected = lambda i: float(sum(r + 1 + i for r in range(world)))  # noqa: E731
    summary: dict[str, Any] = {}

    barrier()
    t0 = time.perf_counter_ns()
    grads = []
    for i in range(chunks):
        s = time.perf_counter_ns()
        x @ x
        records.append(("sequential", "compute", "compute", f"chunk {i}", s, time.perf_counter_ns()))
        grads.append(make(i))
    for i, g in enumerate(grads):
        s = time.perf_counter_ns()
        dist.all_reduce(g)
        records.append(("sequential", "comm", "comm", f"all-reduce {i}", s, time.perf_counter_ns()))
        checks.append(float(g[0]) == expected(i))
    summary["sequential_s"] = (time.perf_counter_ns() - t0) / 1e9

    barrier()
    t0 = time.perf_counter_ns()
    pending = []
    completed_on_return = []
    for i in range(chunks):
        s = time.perf_counter_ns()
        x @ x
        records.append(("overlapped", "compute", "compute", f"chunk {i}", s, time.perf_counter_ns()))
        g = make(i)
        issued = time.perf_counter_ns()
        work, done = reduce_async(g)
        completed_on_return.append(bool(done) and framework == "paddle")
        pending.append((i, g, work, done, issued))
    prev_end = 0
    for i, g, work, done, issued in pending:
        work.wait()
        end = done[0] if done else time.perf_counter_ns()
        start = max(issued, prev_end)  # one communication queue: it starts when the last one ended
        records.append(("overlapped", "comm", "comm", f"all-reduce {i}", start, max(start, end)))
        prev_end = max(start, end)
        checks.append(float(g[0]) == expected(i))
    summary["overlapped_s"] = (time.perf_counter_ns() - t0) / 1e9
    summary["async_op_was_already_done"] = all(completed_on_return) and framework == "paddle"
    summary["all_reduce_correct"] = all(checks)
    summary["threads"] = comp_thread
    return {"rank": rank, "records": records, **summary}


@dataclass
class CommTimelines:
    sequential: Timeline
    overlapped: Timeline
    overlap_s: dict[str, float] = field(default_factory=dict)


def comm_timelines(results: list[dict], label: str) -> CommTimelines:
    """Timelines (one compute row and one comm row per rank) from the ranks' records."""
    tls = {p: Timeline(f"{label}: {p}") for p in ("sequential", "overlapped")}
    for res in results:
        for phase, row, kind, lab, s, e in res["records"]:
            tls[phase].add(f"rank {res['rank']} {row}", s / 1e9, e / 1e9, kind, lab)
    out = CommTimelines(tls["sequential"], tls["overlapped"])
    for phase, tl in tls.items():
        out.overlap_s[phase] = sum(tl.overlap(f"rank {r['rank']} compute", f"rank {r['rank']} comm")
                                   for r in results) / len(results)
    return out


def render_recorded(copy: dict, result: dict) -> str:
    """A recorded ``copy_overlap`` result (see ``grader.gpu_check``)."""
    lines = [f"  {copy['products']} products of {result['n']} x {result['n']} on {copy['spec']}, "
             "each copied to the host:"]
    for r in copy["runs"]:
        lines.append(f"  {r['mode']:<24} total {r['total_s'] * 1e3:8.2f} ms, compute and copy "
                     f"overlapped {r['overlap_s'] * 1e3:7.2f} ms, copies correct: {r['correct']}")
    return "\n".join(lines)


def render_recorded_trap(trap: dict, result: dict) -> str:
    return (f"  read before synchronize equal to the result: {trap['early_matches']} "
            f"(largest difference {trap['early_max_abs_diff']:.3g}); "
            f"after synchronize: {trap['late_matches']}")
