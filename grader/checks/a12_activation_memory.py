"""Assignment 12: the activation bytes a transformer block keeps for backward, from its
shapes, with and without selective recomputation (goes with the chapter on fitting the
model, ``chapters/fitting.md``).

The student writes ``activation_bytes(s, b, h, a, bytes_per_value=2, selective=False)``,
plain Python arithmetic (Korthikanti et al. 2022). The graded checks
(``exercises/hidden/a12_activation_memory.py``) build the block the notebook describes in
PyTorch, run it forward under ``torch.autograd.graph.saved_tensors_hooks`` and compare
with the bytes of every tensor it saved, on shapes the notebook does not show. This
module holds what a student's notebook may import: the public check of the notebook's own
worked example. No function here computes activation memory.
"""
from __future__ import annotations

from typing import Any, Callable

from .result import CheckResult
from .support import StudentError, call

__all__ = ["EXAMPLE", "as_bytes", "public_activation_bytes"]

# The worked example the notebook states: s=2048, b=1, h=4096, a=32, 16-bit; the second
# figure of each pair adds the LayerNorm statistics (2 x 2 per token), which may be left out.
EXAMPLE = {"shape": (2048, 1, 4096, 32), "full": (956_301_312, 956_317_696),
           "selective": (285_212_672, 285_229_056)}


def as_bytes(x: Any) -> float:
    """A number of bytes as a float; ``TypeError`` saying what it is otherwise."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) and not hasattr(x, "__float__"):
        raise TypeError(f"return a number of bytes, not {type(x).__name__}")
    return float(x)



def _public(name: str, ok: bool, message: str, **kw) -> CheckResult:
    """A public check's result: worth nothing (``public()`` prints it without points);
    ``advisory=True`` for an answer that runs but misses the notebook's example (printed to
    stdout: ``nbgrader validate`` does not fail the cell for it)."""
    return CheckResult(name, 1 if ok else 0, 1, message, **kw)

def public_activation_bytes(fn: Callable) -> CheckResult:
    """The notebook's worked example, with and without selective recomputation (not
    graded)."""
    name = "a12 (public): activation_bytes on the notebook's example"
    seen = {}
    try:
        for mode in ("full", "selective"):
            seen[mode] = as_bytes(call(fn, *EXAMPLE["shape"], bytes_per_value=2,
                                       selective=mode == "selective"))
    except StudentError as e:
        return _public(name, False, str(e), hint="run activation_bytes on the example "
                                                      "in a cell")
    except TypeError as e:
        return _public(name, False, "not a number of bytes", seen=str(e),
                            hint="return the bytes as an int or a float")
    for mode, what in (("full", "without recomputation"),
                       ("selective", "with selective recomputation")):
        low, high = EXAMPLE[mode]
        if not low <= seen[mode] <= high:
            return _public(name, False, f"the example {what} is not the example's answer",
                                expected=f"{low:,} bytes ({high:,} with the LayerNorm "
                                         "statistics)",
                                seen=f"{seen[mode]:,.0f} bytes",
                                hint="bytes, not elements; the example's figures are in the "
                                     "task's text",
                                advisory=True)
    return _public(name, True, "the example's bytes with and without selective "
                                    "recomputation (the graded checks count other shapes)")
