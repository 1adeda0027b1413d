"""Hidden checks of assignment 10 (the public ones, the drivers and the rank runner they
share: ``grader.checks.a10_tensor_parallel``).

Task 1, ``f`` and ``g`` (4 points, one per operator and direction), on 2 ranks whose ``x``
and ``dy`` differ (drawn from the course's secret: the same on every run): f's forward is
the identity, f's backward the sum of the ranks' ``dy``, g's forward the sum of the ranks'
``x``, g's backward the identity; and, in the relay's record, each pass communicates as
Megatron's: one all-reduce (of ``dy`` in f's backward, of ``x`` in g's forward) or none.

Task 2, ``tp_mlp`` (6 points), on 2 ranks given the same ``x``, weights and ``dy`` (drawn
from the course's secret; batch 3, d 6, hidden 8). Its backward pass is run with the
course's f and g in place of the notebook's (defined after the student's functions), so a
mistake of task 1 is not counted twice:

- 3: ``y`` equals the MLP on one device on every rank, and came out of the method: among
  the forward pass's collectives is an all-reduce of rank ``r``'s partial sum
  ``gelu(x w1[:, block r] + b1[block r]) w2[block r, :]`` (plus ``b2`` or not). A rank that
  computes the whole MLP gets y right with no communication at all, and is paid nothing;
- 1: the forward pass runs exactly one collective, that all-reduce of a ``(batch, d)``
  tensor, and no send or receive;
- 2: backward, every rank's gradient of ``x`` equals the one-device MLP's; rank ``r``'s
  ``w1``, ``b1``, ``w2`` receive the one-device gradient on block ``r`` and nothing outside
  it (a dense model that scales its gradients by ``1/p`` has the right sum, not these); and
  the backward pass runs exactly one collective, f's all-reduce of rank ``r``'s part of
  x's gradient, ``dz[:, block r] w1[:, block r]^T``.

The phases are the relay's (:func:`grader.checks.a10_tensor_parallel.forward_backward`): the
forward pass is every collective the relay performed before it received ``y``, and ``y`` is
what it received then, so a rank cannot move a forward collective into the backward pass.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from grader.checks.a10_tensor_parallel import (WORLD, example_inputs, fg_inputs,
                                               forward_backward, phase_events, rank_error_hint,
                                               run_program)
from grader.checks.result import CheckResult
from grader.grading.hidden import cases

ASSIGNMENT = "a10_tensor_parallel"

__all__ = ["check_f_g", "check_tp_mlp", "check_all", "judge_f_g", "judge_tp_mlp", "f_g_case",
           "mlp_case", "SIZES", "COURSE_F_G"]

SIZES = {"batch": 3, "d": 6, "hidden": 8}
FG_LENGTH = 5
TOL_A10 = (1e-4, 1e-5)           # rtol, atol against float64

# Megatron's f and g as the course writes them: task 2's backward pass uses these, so that
# it grades where tp_mlp puts f and g, not the notebook's f and g again.
COURSE_F_G_SOURCE = '''
class _CourseF({base}):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class _CourseG({base}):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def f(x):
    return _CourseF.apply(x)


def g(x):
    return _CourseG.apply(x)
'''
COURSE_F_G = {fw: COURSE_F_G_SOURCE.format(base=base) for fw, base in
              (("torch", "torch.autograd.Function"), ("paddle", "paddle.autograd.PyLayer"))}


def _near(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=TOL_A10[0], atol=TOL_A10[1]))


def _on_all(logs: list[dict], key: str, want: list) -> bool:
    return all(key in log["got"] and _near(log["got"][key], w) for log, w in zip(logs, want))


def _ran_fail(names: list[tuple[str, int]], message: str) -> list[CheckResult]:
    hint = rank_error_hint(message, "run the public check above in your notebook")
    return [CheckResult(n, 0, p, message, expected=f"all {WORLD} ranks finish", hint=hint)
            for n, p in names]


# -- task 1: f and g ---------------------------------------------------------------------------
F_G_NAMES = [("a10: f's forward pass is the identity", 1),
             ("a10: f's backward pass all-reduces the gradient", 1),
             ("a10: g's forward pass all-reduces", 1),
             ("a10: g's backward pass is the identity", 1)]
MLP_NAMES = [("a10: y equals the MLP on one device on every rank, by an all-reduce of "
              "partial sums", 3),
             ("a10: one all-reduce forward, of each rank's partial sum", 1),
             ("a10: the backward pass gives each rank its block's gradients, with one "
              "all-reduce", 2)]


# what each pass of f and g communicates, as the relay records it (the values alone can come
# from a sum made with sends and receives)
FG_PHASES = ["f_fwd", "f_bwd", "g_fwd", "g_bwd"]
REDUCED = {"f_bwd": "dy", "g_fwd": "x"}          # the pass's one all-reduce, of this input
COMM_WORDS = {"f_fwd": "no collective", "f_bwd": "one all-reduce, of the gradient",
              "g_fwd": "one all-reduce, of x", "g_bwd": "no collective"}
COMM_HINTS = {
    "f_fwd": "f's forward pass is the identity: no communication (each rank already holds x)",
    "f_bwd": "f's backward pass sums the gradient over the ranks with one all-reduce "
             "(dist.all_reduce), as Megatron's f does",
    "g_fwd": "g's forward pass sums x over the ranks with one all-reduce (dist.all_reduce), "
             "as Megatron's g does",
    "g_bwd": "g's backward pass is the identity: no communication",
}


def _f_g_comm(logs: list[dict], inputs: list[dict], key: str) -> str:
    """'' when every rank's pass ``key`` communicated as Megatron's (the relay's record),
    else what it did instead."""
    for r, (log, t) in enumerate(zip(logs, inputs)):
        events = phase_events(log, FG_PHASES)[key]
        if key not in REDUCED:
            if events:
                return f"rank {r} ran {len(events)} collective(s) in it"
            continue
        if not (len(events) == 1 and events[0]["name"] == "all_reduce" and len(events[0]["t"]) == 1
                and _near(events[0]["t"][0], t[REDUCED[key]])):
            sends = " (it sent or received messages)" if log["sent_to"] or log["recvs"] else ""
            return (f"rank {r}'s pass ran {[e['name'] for e in events]} as its collectives, not "
                    f"one all-reduce of its {REDUCED[key]}{sends}")
    return ""


def check_f_g(f: Callable, g: Callable, framework: str = "torch",
              seed: int | None = None) -> list[CheckResult]:
    """Four points, one per operator and direction (see the module docstring)."""
    inputs = f_g_case(seed)
    logs = run_program([f, g], inputs, framework, "drive_f_g")
    if isinstance(logs, str):
        return _ran_fail(F_G_NAMES, logs)
    return judge_f_g(logs, inputs)


def f_g_case(seed: int | None = None) -> list[dict]:
    """Task 1's inputs: drawn from the course's secret (grader.grading.hidden.cases: the
    same for every student and every run, so identical notebooks score the same) unless
    ``seed`` is given."""
    return fg_inputs(FG_LENGTH, cases(ASSIGNMENT, "f_g").randrange(2**31) if seed is None else seed)


def judge_f_g(logs: list[dict], inputs: list[dict]) -> list[CheckResult]:
    """Task 1's points from the ranks' results (``drive_f_g``'s) and their inputs."""
    names = F_G_NAMES
    failed = next((log["got"]["error"] for log in logs if "error" in log["got"]), None)
    if failed:
        return _ran_fail(names, failed)
    xs, dys = [t["x"] for t in inputs], [t["dy"] for t in inputs]
    sx, sdy = np.sum(xs, axis=0), np.sum(dys, axis=0)
    p = len(inputs)
    out = []
    swapped = _on_all(logs, "f_fwd", [sx] * p) and _on_all(logs, "g_fwd", xs)
    for (name, pts), (op, key, want, mistakes) in zip(names, [
        ("f", "f_fwd", xs, [([sx] * p, "f's forward pass all-reduced x: " + (
            "f and g are swapped (f is the identity forward, g the all-reduce)" if swapped else
            "f is the identity forward (each rank already holds the whole x)"))]),
        ("f", "f_bwd", [sdy] * p, [(dys, "f's backward pass returned each rank's own gradient: "
                                          "it must all-reduce it (each rank's gradient of x "
                                          "comes only from its own columns)")]),
        ("g", "g_fwd", [sx] * p, [(xs, "g's forward pass returned x as it was: it all-reduces "
                                       "(sums the ranks' partial sums)" + (
                                           "; f and g are swapped" if swapped else ""))]),
        ("g", "g_bwd", dys, [([sdy] * p, "g's backward pass all-reduced the gradient: it is the "
                                         "identity (the gradient of y is already the same on "
                                         "every rank), the conjugate of f's")]),
    ]):
        err = logs[0]["got"].get(f"{op}_error") or logs[-1]["got"].get(f"{op}_error")
        if err:
            out.append(CheckResult(name, 0, pts, f"{op} raised: {err}",
                                   hint=f"{op} must run forward and backward on every rank"))
            continue
        if _on_all(logs, key, want):
            wrong_comm = _f_g_comm(logs, inputs, key)
            if not wrong_comm:
                out.append(CheckResult(name, pts, pts, f"{p} ranks, {FG_LENGTH} elements: as "
                                                       "expected, " + COMM_WORDS[key]))
                continue
            out.append(CheckResult(name, 0, pts, f"the values are right, but {wrong_comm}",
                                   expected=COMM_WORDS[key], seen=wrong_comm,
                                   hint=COMM_HINTS[key]))
            continue
        hint = next((h for w, h in mistakes if _on_all(logs, key, w)),
                    "see the table above the task: what each operator gives forward and backward")
        seen = np.round(logs[0]["got"].get(key, np.array([])), 4).tolist()
        out.append(CheckResult(name, 0, pts, "the values differ", expected=np.round(want[0], 4).tolist().__str__(),
                               seen=f"rank 0: {seen}", hint=hint))
    return out


# -- task 2: tp_mlp ----------------------------------------------------------------------------
def _gelu(z):
    return 0.5 * z * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))


def _gelu_grad(z):
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    return cdf + z * np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def _mlp_truth(t: dict, p: int) -> dict:
    """The one-device MLP (float64): y, its gradients, and each rank's partial sum."""
    x, w1, b1, w2, b2, dy = (t[k].astype(np.float64) for k in ("x", "w1", "b1", "w2", "b2", "dy"))
    z = x @ w1 + b1
    a = _gelu(z)
    dz = (dy @ w2.T) * _gelu_grad(z)
    h = w1.shape[1] // p
    blocks = [slice(r * h, (r + 1) * h) for r in range(p)]
    rows = [slice(r * (x.shape[1] // p), (r + 1) * (x.shape[1] // p)) for r in range(p)]
    by_rows = [_gelu(x[:, s] @ w1[s, :] + b1) @ w2 for s in rows]
    by_rows_nob1 = [_gelu(x[:, s] @ w1[s, :]) @ w2 for s in rows]
    return {"y": a @ w2 + b2, "dx": dz @ w1.T, "dw1": x.T @ dz, "db1": dz.sum(0),
            "dw2": a.T @ dy, "b2": b2, "blocks": blocks,
            "partial": [_gelu(x @ w1[:, s] + b1[s]) @ w2[s, :] for s in blocks],
            "partial_dx": [dz[:, s] @ w1[:, s].T for s in blocks],
            "by_rows": [sum(by_rows) + b2, sum(by_rows_nob1) + b2, sum(by_rows) + p * b2]}


def check_tp_mlp(tp_mlp: Callable, framework: str = "torch",
                 seed: int | None = None) -> list[CheckResult]:
    """Six points: y (3), the forward pass's one all-reduce (1), the backward pass (2)."""
    inputs = mlp_case(seed)
    logs = run_program([tp_mlp], inputs, framework, "drive_mlp", extra=COURSE_F_G[framework])
    if isinstance(logs, str):
        return _ran_fail(MLP_NAMES, logs)
    return judge_tp_mlp(logs, inputs)


def mlp_case(seed: int | None = None) -> list[dict]:
    """Task 2's inputs (the same on every rank): drawn from the course's secret, as task 1's,
    unless ``seed`` is given."""
    return example_inputs(SIZES["batch"], SIZES["d"], SIZES["hidden"],
                          cases(ASSIGNMENT, "tp_mlp").randrange(2**31) if seed is None else seed)


def judge_tp_mlp(logs: list[dict], inputs: list[dict]) -> list[CheckResult]:
    """Task 2's points from the ranks' logs (``drive_mlp``'s results, the relays' events)."""
    names = MLP_NAMES
    failed = next((log["got"]["error"] for log in logs if "error" in log["got"]), None)
    if failed:
        return _ran_fail(names, failed)
    s = {"batch": inputs[0]["x"].shape[0], "d": inputs[0]["x"].shape[1],
         "hidden": inputs[0]["w1"].shape[1]}
    p = len(inputs)
    truth = _mlp_truth(inputs[0], p)
    fwd, ys, bwd = zip(*[forward_backward(log) for log in logs])
    return [_check_y(names[0], ys, fwd, truth, p, s), _check_forward_comm(names[1], logs, fwd, truth, s),
            _check_backward(names[2], logs, bwd, truth)]


def _reduces(event: dict, *wants) -> bool:
    """Whether a recorded collective is an all-reduce of one tensor equal to one of ``wants``."""
    return event["name"] == "all_reduce" and len(event["t"]) == 1 and \
        any(_near(event["t"][0], w) for w in wants)


def _check_y(name, ys, fwd, truth, p, s) -> CheckResult:
    name, pts = name
    part, b2 = truth["partial"], truth["b2"]
    if all(_near(y, truth["y"]) for y in ys):
        if all(any(_reduces(e, pr, pr + b2) for e in ev) for ev, pr in zip(fwd, part)):
            return CheckResult(name, pts, pts, f"{p} ranks, batch {s['batch']}, d {s['d']}, hidden "
                                               f"{s['hidden']}: y matches (rtol {TOL_A10[0]:g}), "
                                               "summed by an all-reduce of partial sums")
        lonely = [r for r, ev in enumerate(fwd) if not ev]
        what = ("no collective in the forward pass" if lonely else
                "no all-reduce of each rank's partial sum in the forward pass")
        return CheckResult(name, 0, pts, f"y is right, but {what}: y was not computed by "
                                         "tensor parallelism",
                           expected="rank r all-reduces gelu(x w1[:, block r] + b1[block r]) "
                                    "w2[block r, :], and y is that sum plus b2",
                           seen=f"forward collectives per rank: {[len(ev) for ev in fwd]}",
                           hint="a rank that computes the whole MLP (or any block but its own) "
                                "does every rank's work and holds every weight's gradient: rank "
                                "r computes with its own columns of w1 and rows of w2 only, "
                                "and g all-reduces the partial sums")
    hidden_ar = any(e["name"] == "all_reduce" and e["shapes"] and e["shapes"][0][-1:] == [s["hidden"] // p]
                    for ev in fwd for e in ev)
    if all(_near(y, pr) or _near(y, pr + b2) for y, pr in zip(ys, part)):
        hint = ("each rank holds only its partial sum: the all-reduce is missing. Put g (the "
                "all-reduce) after the second linear, then add b2")
    elif all(_near(y, truth["y"] + (p - 1) * b2) for y in ys):
        hint = (f"y is off by {p - 1} x b2: the bias was added on every rank before the "
                f"all-reduce, which sums it {p} times. Add b2 once, after g")
    elif any(all(_near(y, v) for y in ys) for v in truth["by_rows"]):
        hint = ("w1 was split by rows (and x by columns): then each rank has a partial sum of "
                "x @ w1 before GELU, and GELU of a partial sum is not a part of GELU of the sum. "
                "Split w1 by columns (its hidden units), keep x whole, and split w2 by the same rows")
    elif hidden_ar:
        hint = ("the hidden layer was all-reduced too (2 all-reduces): with w1 split by columns "
                "each rank holds different hidden units, there is nothing to sum there. The only "
                "forward all-reduce is g, after the second linear")
    else:
        hint = ("rank r takes columns r*h/p to (r+1)*h/p - 1 of w1 (and those entries of b1), "
                "applies GELU, multiplies by the same rows of w2, g all-reduces, then b2 is added")
    seen = "; ".join(f"rank {r}: y[0] = {np.round(np.asarray(y)[0], 3).tolist()}" if y is not None
                     else f"rank {r}: no y" for r, y in enumerate(ys))
    return CheckResult(name, 0, pts, "y differs from the MLP on one device",
                       expected=f"y[0] = {np.round(truth['y'][0], 3).tolist()} on every rank",
                       seen=seen, hint=hint)


def _check_forward_comm(name, logs, fwd, truth, s) -> CheckResult:
    name, pts = name
    p2p = sum(len(log["sent_to"]) + log["recvs"] for log in logs)
    calls = [[(e["name"], [tuple(x) for x in e["shapes"]]) for e in ev] for ev in fwd]
    seen = f"rank 0's forward collectives: {calls[0]}" + (f"; {p2p} sends / receives" if p2p else "")
    want = f"one all_reduce of a ({s['batch']}, {s['d']}) tensor per rank, nothing else"
    if p2p:
        return CheckResult(name, 0, pts, "sends or receives were used", expected=want, seen=seen,
                           hint="the MLP needs no point-to-point message: g's all-reduce only")
    counts = [len(ev) for ev in fwd]
    if any(c == 0 for c in counts):
        return CheckResult(name, 0, pts, "no collective in the forward pass", expected=want, seen=seen,
                           hint="each rank holds a partial sum of y after the second linear: "
                                "g all-reduces it")
    if any(c > 1 for c in counts):
        return CheckResult(name, 0, pts, f"{max(counts)} collectives in the forward pass", expected=want,
                           seen=seen, hint="one all-reduce only, after the second linear: the "
                                           "first linear's columns need no communication")
    ok = all(_reduces(ev[0], pr, pr + truth["b2"]) for ev, pr in zip(fwd, truth["partial"]))
    if ok:
        return CheckResult(name, pts, pts, "one all-reduce per rank, of its own block's partial sum")
    return CheckResult(name, 0, pts, "the all-reduced tensor is not the rank's partial sum",
                       expected="rank r all-reduces gelu(x w1[:, block r] + b1[block r]) w2[block r, :]",
                       seen=seen, hint="rank r's block: columns r*h/p to (r+1)*h/p - 1 of w1 and "
                                       "b1, the same rows of w2")


def _own_block(truth: dict, key: str, r: int) -> np.ndarray:
    """Rank ``r``'s share of a weight's one-device gradient: its block, zero elsewhere."""
    want = np.zeros_like(truth[key])
    s = truth["blocks"][r]
    if key == "dw1":
        want[:, s] = truth[key][:, s]
    else:                     # db1's entries, dw2's rows
        want[s] = truth[key][s]
    return want


def _check_backward(name, logs, bwd, truth) -> CheckResult:
    name, pts = name
    err = next((log["got"]["backward_error"] for log in logs if "backward_error" in log["got"]), None)
    if err:
        return CheckResult(name, 0, pts, f"the backward pass raised: {err}",
                           hint="keep y in the autograd graph: f, the linears, GELU, g and b2 only")
    dx_ok = all(_near(log["got"]["dx"], truth["dx"]) for log in logs)
    sums = {k: np.sum([log["got"][k] for log in logs], axis=0) for k in ("dw1", "db1", "dw2")}
    w_ok = all(_near(sums[k], truth[k]) for k in sums)
    own_ok = all(_near(log["got"][k], _own_block(truth, k, r))
                 for r, log in enumerate(logs) for k in ("dw1", "db1", "dw2"))
    comm_ok = all(len(ev) == 1 and _reduces(ev[0], pdx)
                  for ev, pdx in zip(bwd, truth["partial_dx"]))
    if dx_ok and own_ok and comm_ok:
        return CheckResult(name, pts, pts, "x's gradient on every rank, each rank's block of the "
                                           "weights' gradients, and f's one all-reduce match")
    seen = f"x's gradient {'matches' if dx_ok else 'differs'} (rank 0); weights' gradients " \
           f"summed over ranks {'match' if w_ok else 'differ'}; each rank's outside its block " \
           f"{'zero' if own_ok or not w_ok else 'not zero'}; backward collectives per rank " \
           f"{[len(ev) for ev in bwd]}"
    if dx_ok and w_ok and not own_ok:
        hint = ("the weights' gradients add up, but each rank's are not its own block's: a rank "
                "that computes with every weight (and scales its gradients) is not tensor "
                "parallel. Rank r uses only columns of its block of w1 and b1 and the same rows "
                "of w2, so the other blocks get no gradient on it")
    elif dx_ok and own_ok:
        hint = (f"the backward pass ran {[len(ev) for ev in bwd]} collectives (rank 0, rank 1): "
                "f's all-reduce of each rank's part of x's gradient is the only one (g's "
                "backward is the identity)")
    elif not dx_ok and w_ok:
        hint = ("x's gradient is each rank's partial: f (identity forward, all-reduce backward) "
                "goes on x before the first linear")
    else:
        hint = "f on x before the first linear, g on the second linear's output, nothing else"
    message = ("each rank's weights' gradients are not its own block's" if dx_ok and w_ok and not own_ok
               else "the backward pass's collectives are not f's one all-reduce" if dx_ok and own_ok
               else "the gradients differ from the MLP on one device")
    return CheckResult(name, 0, pts, message,
                       expected="every rank: x's gradient = the one-device MLP's; rank r's weights: "
                                "the one-device gradient on block r, 0 elsewhere; one all-reduce "
                                "backward", seen=seen, hint=hint)


def check_all(f: Callable, g: Callable, tp_mlp: Callable, framework: str = "torch") -> list[CheckResult]:
    return check_f_g(f, g, framework) + check_tp_mlp(tp_mlp, framework)
