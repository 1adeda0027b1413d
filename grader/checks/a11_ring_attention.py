"""Assignment 11: ring attention's online-softmax merge, and ring attention for one query
block (goes with the chapter on context parallelism, ``chapters/context_expert.md``).

The student writes, with the tensor operations of PyTorch or Paddle (``FRAMEWORK``):

- ``merge(o1, lse1, o2, lse2) -> (o, lse)``: two partial attention results of the same
  queries over two disjoint sets of keys (each the softmax-weighted values ``o``, shape
  ``(n, dv)``, and the log-sum-exp of the scores ``lse``, shape ``(n,)``) merged into the
  result over the union of the keys; a row with no key at all has ``lse = -inf`` and
  ``o = 0``;
- ``ring_attention(q, k_blocks, v_blocks, masks=None) -> (o, lse)``: attention of one
  query block over key/value blocks arriving one at a time (the order a ring passes them
  on), each block's partial result folded in with ``merge``.

The graded checks (``exercises/hidden/a11_ring_attention.py``) compare with full attention
computed by the judge in float64 on cases the notebook does not show. This module holds
what a student's notebook may import: the public checks (the notebook's own worked
examples) and the conversions both kinds of check share. No function here computes
attention or merges partial results.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .result import CheckResult
from .support import StudentError, call

__all__ = ["FRAMEWORKS", "to_tensor", "to_numpy", "read_pair", "framework_problem",
           "MERGE_EXAMPLE", "RING_EXAMPLE", "public_merge", "public_ring_attention"]

FRAMEWORKS = ("torch", "paddle")

# The worked examples the notebook states (task 1 and task 2), with their answers there.
MERGE_EXAMPLE = {"o1": [[1.0, 0.0]], "lse1": [0.0], "o2": [[0.0, 1.0]],
                 "lse2": [math.log(3.0)], "o": [[0.25, 0.75]], "lse": [math.log(4.0)]}
RING_EXAMPLE = {"q": [[1.0]], "k": [[[0.0]], [[1.0], [2.0]]],
                "v": [[[1.0, 0.0]], [[0.0, 1.0], [1.0, 1.0]]],
                "masks": [[[True]], [[True, False]]],
                "o": [[0.7553, 0.9100]], "lse": [2.4076],
                "o_masked": [[0.2689, 0.7311]], "lse_masked": [1.3133]}
EXAMPLE_ATOL = 5e-4


def framework_problem(name: str, points: float, framework: Any) -> CheckResult | None:
    """A zero-point result when ``FRAMEWORK`` is not one the assignment offers."""
    if isinstance(framework, str) and framework in FRAMEWORKS:
        return None
    return CheckResult(name, 0, points, "FRAMEWORK must be 'torch' or 'paddle'",
                       seen=repr(framework) if isinstance(framework, str) else
                       type(framework).__name__,
                       hint="set FRAMEWORK at the top of the first answer cell")


def to_tensor(framework: str, array: Any):
    """A CPU tensor of ``framework`` holding ``array`` (float32, or bool for a mask)."""
    a = np.asarray(array)
    a = a if a.dtype == np.bool_ else a.astype(np.float32)
    if framework == "paddle":
        from ..wire.values import paddle_module     # no import-time warning in stderr

        paddle = paddle_module()
        return paddle.to_tensor(a, place=paddle.CPUPlace())
    import torch
    return torch.from_numpy(np.ascontiguousarray(a))


def to_numpy(x: Any) -> np.ndarray:
    """float64 values of a tensor of either framework (or anything array-like)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):       # torch
        x = x.detach().cpu()
    if hasattr(x, "numpy"):
        x = x.numpy()
    return np.asarray(x, dtype=np.float64)


def read_pair(out: Any, n: int, dv: int) -> tuple[np.ndarray, np.ndarray]:
    """``(o, lse)`` as float64 arrays of shapes ``(n, dv)`` and ``(n,)`` (an lse of shape
    ``(n, 1)`` is accepted); ``TypeError`` / ``ValueError`` saying what is wrong."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"return a pair (o, lse), not {type(out).__name__}")
    o, lse = to_numpy(out[0]), to_numpy(out[1])
    if o.shape != (n, dv):
        raise ValueError(f"o has shape {o.shape}, expected {(n, dv)}")
    if lse.size != n:
        raise ValueError(f"lse has shape {lse.shape}, expected {(n,)}")
    return o, lse.reshape(n)


def _as_text(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a, dtype=float), precision=4, suppress_small=True)



def _public(name: str, ok: bool, message: str, **kw) -> CheckResult:
    """A public check's result: worth nothing (``public()`` prints it without points);
    ``advisory=True`` for an answer that runs but misses the notebook's example, so that
    the graded checks in the same cell still run."""
    return CheckResult(name, 1 if ok else 0, 1, message, **kw)

def public_merge(fn: Callable, framework: str = "torch") -> CheckResult:
    """The notebook's worked example of task 1 (not graded)."""
    name = "a11 (public): merge on the notebook's example"
    if (bad := framework_problem(name, 1, framework)) is not None:
        return bad
    e = MERGE_EXAMPLE
    args = [to_tensor(framework, e[k]) for k in ("o1", "lse1", "o2", "lse2")]
    try:
        o, lse = read_pair(call(fn, *args), 1, 2)
    except StudentError as err:
        return _public(name, False, str(err), hint="run merge on the example in a cell")
    except (TypeError, ValueError) as err:
        return _public(name, False, "not a pair (o, lse) of the right shapes",
                            seen=str(err), expected="o of shape (1, 2), lse of shape (1,)",
                            hint="return o, lse")
    want_o, want_lse = np.array(e["o"]), np.array(e["lse"])
    if not (np.allclose(o, want_o, atol=EXAMPLE_ATOL) and
            np.allclose(lse, want_lse, atol=EXAMPLE_ATOL)):
        return _public(name, False, "the example's merge is not the example's answer",
                            expected=f"o {_as_text(want_o)}, lse {_as_text(want_lse)} (log 4)",
                            seen=f"o {_as_text(o)}, lse {_as_text(lse)}",
                            hint="the second part holds 3 times the softmax mass of the "
                                 "first (exp(log 3) against exp(0))",
                                advisory=True)
    return _public(name, True, "o [[0.25, 0.75]] and lse log 4, as the example says "
                                    "(the graded checks try other cases)")


def public_ring_attention(fn: Callable, framework: str = "torch") -> CheckResult:
    """The notebook's worked example of task 2, without and with its mask (not graded)."""
    name = "a11 (public): ring_attention on the notebook's example"
    if (bad := framework_problem(name, 1, framework)) is not None:
        return bad
    e = RING_EXAMPLE
    seen = {}
    for label, masks in (("", None), ("_masked", e["masks"])):
        q = to_tensor(framework, e["q"])
        ks = [to_tensor(framework, k) for k in e["k"]]
        vs = [to_tensor(framework, v) for v in e["v"]]
        ms = None if masks is None else [to_tensor(framework, m) for m in masks]
        try:
            seen[label] = read_pair(call(fn, q, ks, vs, ms), 1, 2)
        except StudentError as err:
            return _public(name, False, str(err),
                                hint="run ring_attention on the example in a cell")
        except (TypeError, ValueError) as err:
            return _public(name, False, "not a pair (o, lse) of the right shapes",
                                seen=str(err), expected="o of shape (1, 2), lse of shape (1,)",
                                hint="return o, lse")
    for label, what in (("", "without the mask"), ("_masked", "with the mask")):
        o, lse = seen[label]
        want_o, want_lse = np.array(e["o" + label]), np.array(e["lse" + label])
        if not (np.allclose(o, want_o, atol=EXAMPLE_ATOL) and
                np.allclose(lse, want_lse, atol=EXAMPLE_ATOL)):
            return _public(name, False, f"the example {what} is not the example's answer",
                                expected=f"o {_as_text(want_o)}, lse {_as_text(want_lse)}",
                                seen=f"o {_as_text(o)}, lse {_as_text(lse)}",
                                hint="scores q k^T / sqrt(d) (d = 1 here), masked-out scores "
                                     "left out of the softmax" if label else
                                "scores q k^T / sqrt(d) (d = 1 here): 0, 1 and 2",
                                advisory=True)
    return _public(name, True, "the example's answers with and without the mask "
                                    "(the graded checks try other cases)")
