"""Assignment 10: a tensor-parallel MLP by hand (Megatron's f and g), on counted gloo ranks.

The student writes Megatron's two operators, ``f(x)`` (identity forward, all-reduce of the
gradient backward) and ``g(x)`` (all-reduce forward, identity backward), as a
``torch.autograd.Function`` or a ``paddle.autograd.PyLayer``, and
``tp_mlp(x, w1, b1, w2, b2, rank, world_size)``: ``gelu(x @ w1 + b1) @ w2 + b2`` with ``w1``
split by columns (rank ``r`` takes the ``r``-th of ``p`` equal blocks of the hidden units,
and the same entries of ``b1``), ``w2`` by the same rows, ``f`` before the first linear, ``g``
after the second, ``b2`` added once, after ``g``. Every rank is given the whole weights.

The ranks run as assignment 7's (:func:`grader.ranks.relay.run_ranks`): each rank alone, in a
sandbox of its own when graded, with a stand-in ``dist`` whose every call its trusted relay
performs on gloo and records (name, shapes, the values the rank handed over, in order). In
the rank a course *driver* below calls the student's functions, hands ``y`` to the relay as
the forward pass ends (``deliver``), runs the backward pass and returns the named results.
The relay stamps each collective with its phase: the forward pass is what came before the
relay received ``y``, so no collective that shaped ``y`` can be counted as the backward
pass's (:func:`forward_backward`). Values are compared, never times; the inputs are a new
random draw each graded run.

This module holds what a student's notebook may import: the drivers, the notebook's worked
example and the public checks, which run the notebook's example on 2 ranks. The graded checks
(the point breakdown, the hidden cases, what each mistake looks like) are the course's, in
``exercises/hidden/a10_tensor_parallel.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

import hashlib
import math
import re
import textwrap
from typing import Any, Callable

import numpy as np

from ..lab.core.launch import RankFailed, RankTimeout
from ..ranks.relay import run_ranks
from .result import CheckResult

__all__ = ["run_program", "drive_f_g", "drive_mlp", "example_inputs", "fg_inputs",
           "drive_variants", "variant_logs", "forward_backward", "phase_events", "public_f_g", "public_tp_mlp", "public_f_g_verdict",
           "public_tp_mlp_verdict", "PREAMBLE", "rank_error_hint", "WORLD", "TIMEOUT_S"]

TIMEOUT_S = 25.0       # a correct run takes a few seconds; this only bounds a deadlock
WORLD = 2              # both frameworks: 2 ranks (Paddle's gloo p2p among 3 CPU ranks timed out, a7)
PREAMBLE = {
    "torch": ("import numpy as np\nimport torch\nimport torch.distributed as dist\n"
              "import torch.nn.functional as F\n"),
    "paddle": ("import numpy as np\nimport paddle\nimport paddle.distributed as dist\n"
               "import paddle.nn.functional as F\n"),
}
IMPORTS = {fw: ", ".join(f"`{line}`" for line in code.splitlines()) for fw, code in PREAMBLE.items()}


def rank_error_hint(message: str, default: str) -> str:
    """The hint for what a rank reported: the student's actual mistake where the error
    names one (a stub left as released, a name the ranks do not have), else ``default``."""
    if "NotImplementedError" in message:
        return ("that function is still the stub as released (it raises NotImplementedError): "
                "write its body")
    m = re.search(r"NameError: name '(\w+)' is not defined", message)
    if m:
        return (f"'{m.group(1)}' is not defined in the ranks: they run the source of your "
                f"functions alone, after {IMPORTS['torch']} (Paddle: {IMPORTS['paddle']}); "
                f"define a helper, or import anything else, inside the function that uses it")
    if message.startswith("deadlock"):
        return "a rank waited in an all-reduce that the other rank never reached"
    return default
EXAMPLE = {"batch": 2, "d": 4, "hidden": 4, "seed": 10}   # the notebook's worked example


# -- what runs in a rank (course code, beside the student's functions) -------------------------
def _framework(t: Any) -> str:
    return "torch" if type(t).__module__.split(".")[0] == "torch" else "paddle"


def _leaf(t: Any) -> Any:
    """A fresh copy of ``t`` that collects a gradient."""
    if _framework(t) == "torch":
        return t.detach().clone().requires_grad_(True)
    import paddle

    c = paddle.to_tensor(t.numpy())
    c.stop_gradient = False
    return c


def _grad(t: Any) -> Any:
    g = t.grad
    if g is None:
        if _framework(t) == "torch":
            import torch

            return torch.zeros_like(t.detach())
        import paddle

        return paddle.zeros_like(t.detach())
    return g


def _error(e: BaseException) -> str:
    import traceback

    return traceback.format_exception_only(type(e), e)[-1].strip()[:500]


def drive_f_g(module: Any, t: dict, rank: int, world: int) -> dict:
    """In a rank: ``f`` and ``g`` forward on this rank's ``x``, then backward with its ``dy``;
    each operator's values (or its error) under its own names, so one's failure is not the
    other's. Each pass ends with a delivery to the relay (``f_fwd``, ``f_bwd``, ``g_fwd``,
    ``g_bwd``), so the relay's record says which pass ran which collective
    (:func:`phase_events`)."""
    from grader.ranks.stub import deliver

    out: dict = {}
    for name in ("f", "g"):
        try:
            x = _leaf(t["x"])
            y = getattr(module, name)(x)
            out[f"{name}_fwd"] = y.detach().clone()
            deliver(f"{name}_fwd", {})
            (y * t["dy"]).sum().backward()
            out[f"{name}_bwd"] = _grad(x)
            deliver(f"{name}_bwd", {})
        except Exception as e:  # noqa: BLE001 - the student's error is this operator's result
            out[f"{name}_error"] = _error(e)
    return out


def drive_mlp(module: Any, t: dict, rank: int, world: int) -> dict:
    """In a rank: ``tp_mlp`` forward on leaves that collect gradients, ``y`` delivered to the
    relay (the forward pass ends there), then the backward pass with ``dy``; ``y`` and every
    gradient (or the error)."""
    from grader.ranks.stub import deliver

    leaves = {k: _leaf(t[k]) for k in ("x", "w1", "b1", "w2", "b2")}
    out: dict = {}
    try:
        y = module.tp_mlp(leaves["x"], leaves["w1"], leaves["b1"], leaves["w2"], leaves["b2"],
                          rank, world)
        out["y"] = y.detach().clone()
    except Exception as e:  # noqa: BLE001
        return {"error": _error(e)}
    deliver("forward", {"y": out["y"]})
    try:
        (y * t["dy"]).sum().backward()
        out.update({f"d{k}": _grad(v) for k, v in leaves.items()})
    except Exception as e:  # noqa: BLE001
        out["backward_error"] = _error(e)
    return out


def drive_variants(module: Any, t: dict, rank: int, world: int) -> dict:
    """In a rank: several notebooks' functions in one launch of the ranks (the tests grade
    many answers so; starting the ranks costs seconds). ``module.VARIANTS`` lists
    ``(name, source, driver)``; each source runs in a namespace of its own holding what the
    preamble imports, and ends with a delivery ``variant:<name>``; results are named
    ``<name>/<result>``."""
    import types

    from grader.ranks.stub import deliver

    out: dict = {}
    for name, source, driver in module.VARIANTS:
        ns = {k: getattr(module, k) for k in ("np", "torch", "paddle", "dist") if hasattr(module, k)}
        try:
            exec(compile(source, f"<{name}>", "exec"), ns)
            got = globals()[driver](types.SimpleNamespace(**ns), t, rank, world)
        except Exception as e:  # noqa: BLE001
            got = {"error": _error(e)}
        deliver(f"variant:{name}", {})
        out.update({f"{name}/{k}": v for k, v in got.items()})
    return out


def variant_logs(logs: list[dict], name: str) -> list[dict]:
    """One variant's part of :func:`drive_variants`' logs, shaped like a run of its own (its
    results, its phases and its events, phases counted from its own start)."""
    out = []
    for log in logs:
        labels = [p["label"] for p in log["phases"]]
        end = labels.index(f"variant:{name}")
        start = max([i + 1 for i, lab in enumerate(labels[:end]) if lab.startswith("variant:")],
                    default=0)
        events = [{**e, "phase": e["phase"] - start} for e in log.get("events", [])
                  if start <= e["phase"] <= end]
        got = {k.split("/", 1)[1]: v for k, v in log["got"].items() if k.startswith(f"{name}/")}
        out.append({**log, "events": events, "phases": log["phases"][start:end], "got": got})
    return out


def phase_events(log: dict, labels: list[str]) -> dict[str, list[dict]]:
    """The collectives of each phase a driver delivers in the order ``labels``: phase ``k``
    holds every collective after the last delivery of ``labels[k - 1]`` up to the last
    delivery of ``labels[k]`` (a delivery the student's code made itself only moves
    collectives into a later phase of the driver's, never out of one); a label never
    delivered gets none."""
    ends = {}
    for i, p in enumerate(log.get("phases", [])):
        ends[p["label"]] = i
    out, start = {}, 0
    for label in labels:
        if label not in ends:
            out[label] = []
            continue
        out[label] = [e for e in log.get("events", []) if start <= e["phase"] <= ends[label]]
        start = ends[label] + 1
    return out


def forward_backward(log: dict) -> tuple[list[dict], Any, list[dict]]:
    """A ``drive_mlp`` rank's forward pass as the relay recorded it: ``(forward events, y,
    backward events)``. The forward pass ends where the relay received the last ``y`` before
    the end: its collectives are those stamped before it, ``y`` is what was delivered then
    (not what the rank returned later), and every collective after it is the backward pass's.
    A delivery the student's code made itself only moves collectives into the forward pass
    (``y`` None: no ``y`` was delivered)."""
    ends = [i for i, p in enumerate(log.get("phases", [])) if p["label"] == "forward"]
    events = log.get("events", [])
    if not ends:
        return events, None, []
    end = ends[-1]
    return ([e for e in events if e["phase"] <= end], log["phases"][end]["got"].get("y"),
            [e for e in events if e["phase"] > end])


# -- the judge's (or the notebook's) side ------------------------------------------------------
def _sources(fns: list[Callable]) -> list[str]:
    from ..grading.judge.channel import source_of

    out = []
    for fn in fns:
        try:
            out.append(textwrap.dedent(source_of(fn)))
        except (OSError, TypeError, NameError) as exc:
            raise ValueError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {exc}") from exc
    return out


def _program(fns: list[Callable], framework: str, driver: str, extra: str = "") -> dict:
    """The student's functions as source under the preamble (``extra`` after them), and the
    course driver that calls them in each rank."""
    code = PREAMBLE[framework] + "\n" + "\n\n".join(_sources(fns)) + ("\n\n" + extra if extra else "")
    module = "a10_student_" + hashlib.sha1(code.encode()).hexdigest()[:12]
    return {"module": module, "name": fns[0].__name__, "source": code,
            "driver": f"{__name__}:{driver}"}


def run_program(fns: list[Callable] | dict, inputs: list[dict], framework: str, driver: str,
                extra: str = "", timeout: float = TIMEOUT_S) -> list[dict] | str:
    """Run ``driver`` (``"drive_f_g"`` or ``"drive_mlp"``) with the functions ``fns`` on
    ``len(inputs)`` ranks; each rank's log (``got``: the named results; ``events``: the
    collectives and marks the relay recorded), or a string saying what went wrong."""
    try:
        program = fns if isinstance(fns, dict) else _program(fns, framework, driver, extra)
    except ValueError as exc:
        return str(exc)
    try:
        logs = run_ranks(program, inputs, framework, timeout)
    except RankTimeout as exc:
        return (f"deadlock: rank(s) {exc.ranks} were still waiting after {timeout:.0f} s and were "
                "stopped (did one rank all-reduce where the other did not?)")
    except RankFailed as exc:
        return f"rank {exc.rank} failed: {exc.last_error_line()}"
    for rank, log in enumerate(logs):
        if "error" in log:
            return f"rank {rank} raised: {log['error'].splitlines()[0]}"
        if not isinstance(log.get("got"), dict):
            return "a rank returned something that is not its results"
        if type(log["got"].get("error")) is str:
            return f"rank {rank}: {log['got']['error']}"
    return logs


def _example_y() -> np.ndarray:
    """The notebook's example's y on one device (float64, GELU's erf form: F.gelu's default)."""
    t = example_inputs(**EXAMPLE)[0]
    x, w1, b1, w2, b2 = (t[k].astype(np.float64) for k in ("x", "w1", "b1", "w2", "b2"))
    z = x @ w1 + b1
    return 0.5 * z * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0))) @ w2 + b2


def example_inputs(batch: int, d: int, hidden: int, seed: int, world: int = WORLD) -> list[dict]:
    """The same ``x``, weights and ``dy`` on every rank (float32)."""
    rng = np.random.default_rng(seed)
    t = {"x": rng.standard_normal((batch, d)), "w1": rng.standard_normal((d, hidden)) / math.sqrt(d),
         "b1": 0.1 * rng.standard_normal(hidden), "w2": rng.standard_normal((hidden, d)) / math.sqrt(hidden),
         "b2": 0.1 * rng.standard_normal(d), "dy": rng.standard_normal((batch, d))}
    t = {k: v.astype(np.float32) for k, v in t.items()}
    return [dict(t) for _ in range(world)]


def fg_inputs(length: int, seed: int, world: int = WORLD) -> list[dict]:
    """A different ``x`` and ``dy`` on each rank (what f and g do shows in the values)."""
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(length).astype(np.float32),
             "dy": rng.standard_normal(length).astype(np.float32)} for _ in range(world)]


def _allclose_a10(a: Any, b: Any, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


# -- the public checks: the notebook's worked example, on 2 ranks ------------------------------
FG_EXAMPLE = [{"x": np.array([1.0, 2.0, 3.0], np.float32), "dy": np.array([1.0, 0.0, -1.0], np.float32)},
              {"x": np.array([10.0, 20.0, 30.0], np.float32), "dy": np.array([0.5, 0.5, 0.5], np.float32)}]


def public_f_g(f: Callable, g: Callable, framework: str = "torch") -> CheckResult:
    """Lenient: f and g run on 2 ranks forward and backward; the notebook's example's values
    (x = [1, 2, 3] and [10, 20, 30], dy = [1, 0, -1] and [0.5, 0.5, 0.5]) are an advisory
    finding."""
    return public_f_g_verdict(run_program([f, g], [dict(t) for t in FG_EXAMPLE], framework,
                                          "drive_f_g"))


def public_f_g_verdict(logs: list[dict] | str) -> CheckResult:
    """:func:`public_f_g`'s verdict from the ranks' logs on the example (or what went wrong)."""
    name = "a10 (public): f and g on the notebook's example"
    if isinstance(logs, str):
        return CheckResult(name, 0, 1, logs, expected="both ranks finish",
                           hint=rank_error_hint(logs, "the line above is the rank's error"))
    errors = [f"rank {r}: {log['got'][k]}" for r, log in enumerate(logs) if "error" in log["got"]
              for k in ("error",)] + [f"rank {r}: {log['got'][k]}" for r, log in enumerate(logs) for k in ("f_error", "g_error")
              if k in log["got"]]
    if errors:
        return CheckResult(name, 0, 1, errors[0], expected="f and g run forward and backward",
                           hint=rank_error_hint(errors[0], "f and g each return a tensor shaped "
                                                "like x; write them as an autograd function "
                                                "(PyTorch) or a PyLayer (Paddle)"))
    sx = FG_EXAMPLE[0]["x"] + FG_EXAMPLE[1]["x"]
    sdy = FG_EXAMPLE[0]["dy"] + FG_EXAMPLE[1]["dy"]
    want = {"f_fwd": [t["x"] for t in FG_EXAMPLE], "f_bwd": [sdy, sdy],
            "g_fwd": [sx, sx], "g_bwd": [t["dy"] for t in FG_EXAMPLE]}
    words = {"f_fwd": "f's forward", "f_bwd": "f's backward", "g_fwd": "g's forward",
             "g_bwd": "g's backward"}
    wrong = [k for k, w in want.items() if not all(_allclose_a10(log["got"][k], w[r]) for r, log in enumerate(logs))]
    if wrong:
        seen = "; ".join(f"{words[k]} on rank 0: {np.round(logs[0]['got'][k], 4).tolist()} "
                         f"(the example's: {np.round(want[k][0], 4).tolist()})" for k in wrong)
        return CheckResult(name, 0, 1, f"{', '.join(words[k] for k in wrong)} differ from the example",
                           expected="f: y = x, x's gradient = dy summed over ranks; "
                                    "g: y = x summed over ranks, x's gradient = dy",
                           seen=seen, hint="the table above the task gives each value",
                           advisory=True)
    passes = ["f_fwd", "f_bwd", "g_fwd", "g_bwd"]
    counts = [[sum(e["name"] == "all_reduce" for e in phase_events(log, passes)[k]) for k in passes]
              for log in logs]
    if any(c != [0, 1, 1, 0] for c in counts):
        return CheckResult(name, 0, 1, "the values are right, but the passes did not communicate "
                                       "as Megatron's f and g",
                           expected="all-reduces per pass (f forward, f backward, g forward, g "
                                    "backward): [0, 1, 1, 0]",
                           seen=f"rank 0: {counts[0]}, rank 1: {counts[-1]}",
                           hint="f's backward and g's forward each sum over the ranks with one "
                                "dist.all_reduce; the other two passes do not communicate",
                           advisory=True)
    return CheckResult(name, 1, 1, "f and g give the example's values on both ranks, forward "
                                   "and backward, one all-reduce where Megatron's has one "
                                   "(graded: other values)")


def public_tp_mlp(tp_mlp: Callable, f: Callable, g: Callable, framework: str = "torch") -> CheckResult:
    """Lenient: ``tp_mlp`` (with your f and g) runs on 2 ranks on the notebook's example and
    returns y shaped (batch, d); y equal to the dense MLP's on every rank is an advisory
    finding."""
    return public_tp_mlp_verdict(run_program([tp_mlp, f, g], example_inputs(**EXAMPLE), framework,
                                             "drive_mlp"))


def public_tp_mlp_verdict(logs: list[dict] | str) -> CheckResult:
    """:func:`public_tp_mlp`'s verdict from the ranks' logs on the example."""
    name = "a10 (public): tp_mlp on the notebook's example"
    if isinstance(logs, str):
        return CheckResult(name, 0, 1, logs, expected="both ranks return y",
                           hint=rank_error_hint(logs, "the line above is the rank's error"))
    want = _example_y()
    failed = next((log["got"]["error"] for log in logs if "error" in log["got"]), None)
    if failed:
        return CheckResult(name, 0, 1, failed, expected="both ranks return y",
                           hint=rank_error_hint(failed, "the line above is the rank's error"))
    ys = [forward_backward(log)[1] for log in logs]     # y as the forward pass ended
    shapes = [tuple(np.shape(y)) for y in ys]
    if any(s != want.shape for s in shapes):
        return CheckResult(name, 0, 1, "wrong shape", expected=f"{want.shape} on each rank",
                           seen=str(shapes), hint="return y, the whole MLP output, on every rank")
    wrong = [r for r, y in enumerate(ys) if not _allclose_a10(y, want)]
    if wrong:
        return CheckResult(name, 0, 1, f"rank(s) {wrong}: y differs from the MLP on one device",
                           expected=f"y[0] = {np.round(want[0], 4).tolist()}",
                           seen=f"y[0] on rank {wrong[0]} = {np.round(ys[wrong[0]][0], 4).tolist()}",
                           hint="the example below the task prints both; "
                                "column blocks of w1, the same rows of w2, g after the second "
                                "linear, b2 once", advisory=True)
    counts = [len(forward_backward(log)[0]) for log in logs]
    if any(c != 1 for c in counts):
        return CheckResult(name, 0, 1, f"y is right, but the forward pass ran {counts} collectives "
                                       "(rank 0, rank 1)",
                           expected="one all-reduce on each rank (g's)", seen=f"{counts}",
                           hint="each rank computes its own block's partial sum and g sums them; "
                                "a rank that computes the whole MLP does the work of every rank",
                           advisory=True)
    return CheckResult(name, 1, 1, "y equals the MLP on one device on both ranks, one collective "
                                   "each forward (graded: other sizes, what was all-reduced and "
                                   "the backward pass)")
