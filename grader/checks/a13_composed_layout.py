"""Assignment 13: compose a 2-D or 3-D layout of the capstone's transformer for a memory
budget, and predict the memory of its rank 0 (goes with ``chapters/capstone.md``).

The student writes two functions whose answers are data, never code the grader runs:

- ``predict_memory(model, layout)``: the bytes rank 0 holds, ``{"params": ...,
  "grads": ..., "optimizer": ..., "activations": ...}``;
- ``choose_layout(model, ranks, budget_bytes)``: a layout, in the words of the
  student's framework (PyTorch: the capstone's mesh dimensions ``{"dp_replicate": R,
  "dp_shard": S, "tp": T, "pp": P}``; Paddle: fleet's ``hybrid_configs``
  ``{"dp_degree": R, "sharding_degree": S, "mp_degree": T, "pp_degree": P}``), or the
  capstone's text ``"RxSxTxP"`` in either.

The graded checks (``exercises/hidden/a13_composed_layout.py``) build and step each
layout themselves, with trusted PyTorch code on one rank of a fake process group, and
measure memory and collectives. This module holds what a notebook may import: the
notebook's example model, the reading of a layout from either framework's words, and the
public checks of the notebook's own example. No function here computes memory.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from .result import CheckResult
from .support import StudentError, call

__all__ = ["KINDS", "MODEL", "KEYS", "EXAMPLE", "read_layout", "layout_words",
           "read_memory", "public_predict_memory", "public_choose_layout"]

KINDS = ("params", "grads", "optimizer", "activations")
# the capstone's model, with 4 micro-batches per step when there is a pipeline
MODEL = {"vocab": 64, "width": 32, "heads": 4, "blocks": 4, "seq": 16, "batch": 8,
         "micro": 4}
# a layout's degrees (replicate, shard, tensor, pipeline) in each framework's words
KEYS = {"torch": ("dp_replicate", "dp_shard", "tp", "pp"),
        "paddle": ("dp_degree", "sharding_degree", "mp_degree", "pp_degree")}
# the notebook's worked example: MODEL on 1x2x2x1 (FSDP x2 + TP x2), rank 0
EXAMPLE = {"layout": (1, 2, 2, 1),
           "memory": {"params": 57_536, "grads": 57_536, "optimizer": 115_072,
                      "activations": 399_876}}
_TEXT = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*$")


def read_layout(answer: Any, framework: str = "torch") -> tuple[int, int, int, int]:
    """``(replicate, shard, tp, pp)`` from ``"RxSxTxP"`` or the framework's dict;
    ``ValueError`` saying what to write otherwise."""
    keys = KEYS.get(framework, KEYS["torch"])
    if answer is None:
        raise ValueError("no layout (None): every case the grader asks has layouts that "
                         f"fit; return a dict {{{', '.join(repr(k) for k in keys)}}}")
    if isinstance(answer, str):
        m = _TEXT.match(answer)
        if not m:
            raise ValueError(f"{answer!r} is not a layout: write 'RxSxTxP' (replicate x "
                             "shard x tensor x pipeline), e.g. '1x2x2x1'")
        return tuple(int(g) for g in m.groups())
    if not isinstance(answer, dict):
        raise ValueError(f"a layout is a dict {{{', '.join(repr(k) for k in keys)}}} or "
                         f"a string 'RxSxTxP', not {type(answer).__name__}")
    other = KEYS["paddle" if keys == KEYS["torch"] else "torch"]
    if set(answer) == set(other) and set(other) != set(keys):
        keys = other                   # the other framework's words mean the same
    missing, extra = set(keys) - set(answer), set(answer) - set(keys)
    if missing or extra:
        raise ValueError(f"a layout's keys are {list(keys)}; missing {sorted(missing)}, "
                         f"unexpected {sorted(map(str, extra))}")
    degrees = tuple(answer[k] for k in keys)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in degrees):
        raise ValueError(f"degrees are whole numbers of at least 1: {answer}")
    return degrees


def layout_words(layout: tuple[int, int, int, int], framework: str = "torch") -> dict:
    """The layout as the framework's dict (what ``predict_memory`` is given)."""
    return dict(zip(KEYS.get(framework, KEYS["torch"]), layout))


def text(layout: tuple[int, int, int, int]) -> str:
    return "x".join(str(d) for d in layout)


def read_memory(memory: Any) -> dict[str, float]:
    """``{kind: bytes}`` with exactly the four kinds as floats."""
    memory = dict(memory)
    missing, extra = set(KINDS) - set(memory), set(memory) - set(KINDS)
    if missing or extra:
        raise ValueError(f"the keys must be {list(KINDS)}; missing {sorted(missing)}, "
                         f"unexpected {sorted(map(str, extra))}")
    out = {}
    for k in KINDS:
        v = memory[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{k} must be a number of bytes, not {type(v).__name__}")
        out[k] = float(v)
    return out


def public_predict_memory(fn: Callable, framework: str = "torch") -> CheckResult:
    """The notebook's example (not graded)."""
    name = "a13 (public): predict_memory on the notebook's example"
    try:
        got = read_memory(call(fn, dict(MODEL), layout_words(EXAMPLE["layout"], framework)))
    except StudentError as e:
        return CheckResult(name, 0, 1, str(e), hint="run predict_memory(MODEL, LAYOUT) "
                                                     "in a cell")
    except (TypeError, ValueError) as e:
        return CheckResult(name, 0, 1, "not a dict of the four kinds", seen=str(e),
                           hint="return {'params': ..., 'grads': ..., 'optimizer': ..., "
                                "'activations': ...}, bytes as numbers")
    want = EXAMPLE["memory"]
    off = [k for k in KINDS if abs(got[k] - want[k]) > 0.02 * want[k]]
    if off:
        return CheckResult(name, 0, 1, f"not the example's {', '.join(off)}",
                           expected=", ".join(f"{k} {want[k]:,}" for k in off),
                           seen=", ".join(f"{k} {got[k]:,.0f}" for k in off),
                           hint="the example's figures are in the task's text", advisory=True)
    return CheckResult(name, 1, 1, "the example's four figures (the graded tests measure "
                                   "other layouts and models)")


def public_choose_layout(fn: Callable, framework: str = "torch") -> CheckResult:
    """A layout of the right form and size for the notebook's example (not graded)."""
    name = "a13 (public): choose_layout gives a layout of 8 ranks"
    try:
        layout = read_layout(call(fn, dict(MODEL), 8, 600_000), framework)
    except StudentError as e:
        return CheckResult(name, 0, 1, str(e), hint="run choose_layout(MODEL, 8, 600_000) "
                                                     "in a cell")
    except ValueError as e:
        return CheckResult(name, 0, 1, "not a layout", seen=str(e),
                           hint=f"return a dict with the keys {list(KEYS[framework])}")
    r, s, t, p = layout
    if r * s * t * p != 8:
        return CheckResult(name, 0, 1, f"{text(layout)} uses {r * s * t * p} ranks, not 8",
                           hint="the four degrees multiply to the number of ranks")
    return CheckResult(name, 1, 1, f"{text(layout)}: 8 ranks (the graded tests build it "
                                   "and measure its memory and communication)")
