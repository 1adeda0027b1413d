"""Hidden checks of assignment 6 (the public ones, the model and the training loops:
``grader.checks.a6_data_parallel`` and ``grader.checks.a6_model``)."""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from grader.checks import a6_model as m
from grader.checks.a6_data_parallel import (ATOL, DEVICES, ROWS, RTOL, STEPS, train_dp,
                                            train_single)
from grader.checks.result import CheckResult
from grader.checks.support import StudentError, call

__all__ = ["chunk_sizes", "SCATTER_CASES", "check_scatter", "check_replicate", "check_parallel_apply", "check_gather",
           "check_reduce_gradients", "check_training", "check_all"]

PROBE_WAIT_S = 5.0          # how long a probe call waits for its siblings to start


def _raised(name: str, points: float, err: StudentError) -> CheckResult:
    return CheckResult(name, 0, points, "your code raised an exception", seen=str(err),
                       hint="run the public check in the notebook and read the traceback")


def _rows(t: Any) -> np.ndarray:
    a = m.to_numpy(t)
    return a.reshape(len(a), -1) if len(a) else np.zeros((0, 2), np.float32)


def chunk_sizes(rows: int, n: int) -> list[int]:
    """The chunk sizes of ``torch.chunk(batch, n)`` (what ``nn.DataParallel``'s scatter does):
    ``ceil(rows / n)`` rows each, the last chunk what is left, no empty chunk."""
    size = -(-rows // n)
    return [min(size, rows - start) for start in range(0, rows, size)]


# (rows, devices): uneven (10 on 3: 4, 4, 2), a remainder of one, fewer chunks than devices
# (6 on 4: 2, 2, 2), fewer rows than devices
SCATTER_CASES = ((10, 3), (8, 3), (7, 4), (6, 4), (2, 3))


def _sizes_hint(sizes: list[int], rows: int, n: int) -> str:
    spread = [len(a) for a in np.array_split(np.arange(rows), n)]
    if sizes in (spread, [s for s in spread if s]):
        return ("these are NumPy array_split's sizes (torch.tensor_split's): DataParallel "
                "splits like torch.chunk, ceil(rows / n) rows per chunk and the last one "
                "smaller")
    if 0 in sizes:
        return ("torch.chunk returns no empty chunk: with few rows there are fewer chunks "
                "than devices")
    return "every chunk has ceil(rows / n) rows except the last, which gets what is left"


def check_scatter(scatter: Callable, framework: str = "torch", points: float = 2) -> CheckResult:
    """Half the points for keeping every sample once and in order, half for torch.chunk's
    chunk sizes."""
    name = "a6: scatter splits a batch as nn.DataParallel does (torch.chunk)"
    other_sizes = None
    for rows, n in SCATTER_CASES:
        batch = m.from_numpy(np.arange(rows * 2, dtype=np.float32).reshape(rows, 2), framework)
        try:
            chunks = list(call(scatter, batch, n))
        except StudentError as e:
            return _raised(name, points, e)
        sizes = [len(m.to_numpy(c)) for c in chunks]
        kept = np.concatenate([_rows(c) for c in chunks]) if chunks else np.zeros((0, 2))
        case = f"scatter(batch of {rows} rows, {n})"
        if sum(sizes) != rows or not np.array_equal(kept, m.to_numpy(batch)):
            lost = rows - sum(sizes)
            what = (f"{lost} sample(s) dropped" if lost > 0 else
                    f"{-lost} sample(s) duplicated" if lost < 0 else "samples reordered")
            return CheckResult(name, 0, points, f"{case}: {what}",
                               expected=f"chunks that concatenate back to the {rows} rows, in order",
                               seen=f"chunk sizes {sizes}",
                               hint="chunks of ceil(rows / n) rows, the last one what is left "
                                    "(rows // n alone drops the remainder)")
        if sizes != chunk_sizes(rows, n) and other_sizes is None:
            other_sizes = (case, sizes, rows, n)
    if other_sizes is not None:
        case, sizes, rows, n = other_sizes
        return CheckResult(name, points / 2, points,
                           f"{case}: every sample kept once, but not torch.chunk's chunk sizes",
                           expected=f"chunk sizes {chunk_sizes(rows, n)}",
                           seen=f"chunk sizes {sizes}", hint=_sizes_hint(sizes, rows, n))
    return CheckResult(name, points, points, "every batch split as torch.chunk splits it "
                       "(10 rows on 3 devices: 4, 4, 2), no sample lost or repeated")


def _bump(t: Any) -> None:
    """Add 1 in place: if two replicas share storage, the other one sees it."""
    if m.framework_of(t) == "torch":
        import torch

        with torch.no_grad():
            t.add_(1.0)
    else:
        import paddle

        paddle.assign(t + 1.0, output=t)


def check_replicate(replicate: Callable, framework: str = "torch", points: float = 2) -> CheckResult:
    name = "a6: replicate makes independent copies of the parameters"
    params = m.init_params(framework)
    before = {k: m.to_numpy(v).copy() for k, v in params.items()}
    try:
        reps = list(call(replicate, params, DEVICES))
    except StudentError as e:
        return _raised(name, points, e)
    if len(reps) != DEVICES:
        return CheckResult(name, 0, points, "wrong number of replicas",
                           expected=f"{DEVICES} replicas", seen=f"{len(reps)}",
                           hint="one replica per device")
    for i, r in enumerate(reps):
        if set(r) != set(params) or any(not np.array_equal(m.to_numpy(r[k]), before[k]) for k in params):
            return CheckResult(name, 0, points, f"replica {i} differs from the parameters",
                               expected=f"the same names {sorted(params)} and values",
                               seen=f"names {sorted(r)}", hint="copy every parameter's values")
    shared = [k for k in params for i in range(DEVICES) for j in range(i)
              if reps[i][k] is reps[j][k] or reps[i][k] is params[k]]
    if not shared:
        for k in params:
            _bump(reps[0][k])
        shared = [k for k in params if not np.array_equal(m.to_numpy(reps[1][k]), before[k])
                  or not np.array_equal(m.to_numpy(params[k]), before[k])]
    if shared:
        same_dict = any(reps[i] is reps[j] or reps[i] is params for i in range(DEVICES) for j in range(i))
        return CheckResult(name, 0, points, "replicas share parameter objects or storage",
                           expected="each replica owns its tensors: changing one changes no other",
                           seen=f"shared: {sorted(set(shared))}"
                                + (" (the replicas are one and the same dict)" if same_dict else ""),
                           hint=("[params] * n repeats one dict" if same_dict else
                                 "a new dict still holds the same tensors")
                                + "; copy every tensor (clone()) for each replica")
    return CheckResult(name, points, points, f"{DEVICES} replicas, equal values, no storage shared")


def check_parallel_apply(parallel_apply: Callable, points: float = 3) -> CheckResult:
    """Order and pairing are worth all but one point; running the calls at once, the last one.

    Concurrency is a property, not a timing: each probe call waits until all ``n`` calls have
    started. Run at once, they all start; run one after another, the first waits in vain
    (``PROBE_WAIT_S``, then gives up so grading goes on)."""
    name = "a6: parallel_apply runs fn(replica_i, *input_i) for every i, at once"
    n, lock = 4, threading.Lock()
    started, all_in, state = [0], threading.Event(), {"gave_up": False, "peak": 0}

    def probe(replica: dict, x: Any) -> tuple[int, Any]:
        with lock:
            started[0] += 1
            state["peak"] = max(state["peak"], started[0])
            if started[0] == n:
                all_in.set()
        if not state["gave_up"] and not all_in.wait(PROBE_WAIT_S):
            state["gave_up"] = True
        with lock:
            started[0] -= 1
        return replica["id"], x

    replicas = [{"id": i} for i in range(n)]
    inputs = [(10 * i,) for i in range(n)]
    try:
        out = list(call(parallel_apply, probe, replicas, inputs))
    except StudentError as e:
        return _raised(name, points, e)
    want = [(i, 10 * i) for i in range(n)]
    if out != want:
        return CheckResult(name, 0, points, "results out of order or replicas paired with the wrong inputs",
                           expected=f"{want}  (replica id, input) per call", seen=f"{out}",
                           hint="results[i] must be fn(replicas[i], *inputs[i]); collect them by index")
    if state["peak"] < n:
        return CheckResult(name, points - 1, points, "right results, but the calls ran one after another",
                           expected=f"{n} calls in flight at once", seen=f"at most {state['peak']} at once",
                           hint="start one threading.Thread per replica, then join them all")
    return CheckResult(name, points, points, f"{n} calls in flight at once, results in order")


def check_gather(gather: Callable, framework: str = "torch", points: float = 1) -> CheckResult:
    name = "a6: gather concatenates the outputs in order"
    parts = [np.full((k, 1), i, dtype=np.float32) for i, k in enumerate(chunk_sizes(ROWS, DEVICES))]
    try:
        got = m.to_numpy(call(gather, [m.from_numpy(p, framework) for p in parts]))
    except StudentError as e:
        return _raised(name, points, e)
    want = np.concatenate(parts)
    if got.shape == want.shape and np.array_equal(got, want):
        return CheckResult(name, points, points, "outputs of 4, 4 and 2 rows gathered into 10, in order")
    return CheckResult(name, 0, points, "gathered outputs differ", expected=f"shape {want.shape}, "
                       f"replica 0's rows first", seen=f"shape {got.shape}: {got.ravel().tolist()}",
                       hint="concatenate along dim 0 (torch.cat / paddle.concat), in replica order")


def _diagnose(got: dict, full: dict, chunk_grads: list[dict], counts: list[int]) -> str:
    n = len(counts)
    candidates = {
        "the replicas' gradients summed (n times too large)":
            {k: sum(g[k] for g in chunk_grads) for k in full},
        "a plain mean that ignores the chunk sizes":
            {k: sum(g[k] for g in chunk_grads) / n for k in full},
        "averaged twice (n times too small)": {k: full[k] / n for k in full},
        "the first replica's gradient only": dict(chunk_grads[0]),
    }
    for label, cand in candidates.items():
        if all(np.allclose(got[k], cand[k], rtol=RTOL, atol=ATOL) for k in full):
            return label
    return "none of the usual mistakes"


def check_reduce_gradients(reduce_gradients: Callable, framework: str = "torch",
                           points: float = 3) -> CheckResult:
    name = "a6: reduce_gradients gives the full batch's gradient"
    params = m.init_params(framework)
    x, y = m.make_batch(framework, ROWS)
    _, _, full_t = m.local_step(params, x, y)
    counts = chunk_sizes(ROWS, DEVICES)          # 4, 4, 2
    xs, ys, start = [], [], 0
    for c in counts:
        xs.append(x[start:start + c])
        ys.append(y[start:start + c])
        start += c
    chunk_t = [m.local_step(params, a, b)[2] for a, b in zip(xs, ys)]
    try:
        got_t = call(reduce_gradients, chunk_t, list(counts))
        got = {k: m.to_numpy(got_t[k]) for k in params}
    except StudentError as e:
        return _raised(name, points, e)
    except (KeyError, TypeError, AttributeError) as e:
        return CheckResult(name, 0, points, "reduce_gradients did not return a dict of tensors",
                           expected=f"a dict with keys {sorted(params)}", seen=repr(e),
                           hint="return {name: reduced tensor} for every parameter")
    full = {k: m.to_numpy(v) for k, v in full_t.items()}
    if all(np.allclose(got[k], full[k], rtol=RTOL, atol=ATOL) for k in full):
        worst = max(float(np.max(np.abs(got[k] - full[k]))) for k in full)
        return CheckResult(name, points, points, f"matches the full-batch gradient (max abs diff {worst:.1e})")
    chunk_np = [{k: m.to_numpy(v) for k, v in g.items()} for g in chunk_t]
    seen = _diagnose(got, full, chunk_np, counts)
    return CheckResult(name, 0, points, "the reduced gradient is not the full batch's",
                       expected=f"sum_i (n_i / N) * g_i with n = {counts}, N = {sum(counts)} "
                                f"(rtol {RTOL:g}, atol {ATOL:g})",
                       seen=f"looks like {seen}",
                       hint="each g_i is the gradient of its chunk's MEAN loss: weight it by its "
                            "share of the batch, and average only once")


def check_training(pieces: dict[str, Callable], framework: str = "torch", points: float = 3) -> CheckResult:
    name = f"a6: {STEPS} data-parallel steps match single-device training"
    try:
        got, pred = call(train_dp, pieces, framework)
    except StudentError as e:
        return _raised(name, points, e)
    want = train_single(framework)
    bad = [k for k in want if got[k].shape != want[k].shape
           or not np.allclose(got[k], want[k], rtol=RTOL, atol=ATOL)]
    if pred is None or pred.shape != (ROWS, m.OUT):
        bad.append("gathered predictions")
    if not bad:
        worst = max(float(np.max(np.abs(got[k] - want[k]))) for k in want)
        return CheckResult(name, points, points, f"parameters agree after {STEPS} steps on "
                           f"{DEVICES} replicas (max abs diff {worst:.1e}, atol {ATOL:g}, rtol {RTOL:g})")
    return CheckResult(name, 0, points, "training diverges from the single-device run",
                       expected=f"parameters within rtol {RTOL:g} / atol {ATOL:g} after {STEPS} steps",
                       seen=f"differ: {bad}", hint="the piece checks above say which piece to fix first")


def check_all(pieces: dict[str, Callable], framework: str = "torch") -> list[CheckResult]:
    """``pieces`` maps 'scatter', 'replicate', 'parallel_apply', 'gather', 'reduce_gradients'
    to the student's functions."""
    return [check_scatter(pieces["scatter"], framework), check_replicate(pieces["replicate"], framework),
            check_parallel_apply(pieces["parallel_apply"]), check_gather(pieces["gather"], framework),
            check_reduce_gradients(pieces["reduce_gradients"], framework),
            check_training(pieces, framework)]
