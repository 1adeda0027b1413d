"""Assignment 9: memory per rank under ZeRO's stages, and a 1F1B pipeline schedule.

The student writes two functions, both plain Python (no framework, no device):

- ``zero_bytes(n_params, ranks, stage, bytes_per_value=4, optimizer_values=2)``: the
  bytes one rank holds for the parameters, their gradients and the optimizer state when
  ZeRO stage ``stage`` (0 to 3) splits them over ``ranks`` data-parallel ranks, as
  ``{"params": ..., "grads": ..., "optimizer": ...}``;
- ``one_f_one_b(stages, micro)``: the order in which each pipeline stage runs the
  forward (``"F3"`` or ``("F", 3)``) and backward passes of ``micro`` micro-batches under
  the 1F1B schedule, one list per stage.

The graded checks (``exercises/hidden/a9_zero_pipeline.py``) compare the accounting with
ZeRO's, and run the schedule on a clock of whole time units (a forward takes 1, a
backward 2), so the grade never depends on the machine. This module holds what a
student's notebook may import: the public checks and the parsing both kinds share.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from .result import CheckResult
from .support import StudentError, call

__all__ = ["KINDS", "normalise_memory", "normalise_schedule", "public_zero_bytes",
           "public_one_f_one_b"]

KINDS = ("params", "grads", "optimizer")
_OP = re.compile(r"^\s*([FB])\s*(\d+)\s*$")


def normalise_memory(memory: Any) -> dict[str, float]:
    """``{kind: bytes}`` with exactly the three kinds as floats; ``TypeError`` /
    ``ValueError`` saying what is wrong otherwise."""
    memory = dict(memory)
    missing, extra = set(KINDS) - set(memory), set(memory) - set(KINDS)
    if missing or extra:
        raise ValueError(f"the keys must be {list(KINDS)}; missing {sorted(missing)}, "
                         f"unexpected {sorted(extra)}")
    return {k: float(memory[k]) for k in KINDS}


def _op(entry: Any) -> tuple[str, int]:
    if isinstance(entry, str):
        m = _OP.match(entry)
        if not m:
            raise ValueError(f"{entry!r} is not a pass: write 'F3' or ('F', 3)")
        return m.group(1), int(m.group(2))
    kind, mb = entry
    if kind not in ("F", "B"):
        raise ValueError(f"{entry!r}: the kind of a pass is 'F' or 'B'")
    return str(kind), int(mb)


def normalise_schedule(schedule: Any, stages: int) -> list[list[tuple[str, int]]]:
    """One list of ``(kind, micro_batch)`` per stage, from strings ``"F3"`` / ``"B0"`` or
    pairs ``("F", 3)``."""
    schedule = [list(s) for s in schedule]
    if len(schedule) != stages:
        raise ValueError(f"{stages} stages need {stages} lists, got {len(schedule)}")
    return [[_op(e) for e in s] for s in schedule]


def public_zero_bytes(fn: Callable) -> CheckResult:
    """Lenient: it returns the three kinds as numbers, and stage 0 on one rank is the
    whole model."""
    name = "a9 (public): zero_bytes returns the three kinds"
    try:
        got = normalise_memory(call(fn, 1000, 1, 0))
    except StudentError as e:
        return CheckResult(name, 0, 1, str(e), hint="run zero_bytes(1000, 1, 0) in a cell")
    except (TypeError, ValueError) as e:
        return CheckResult(name, 0, 1, "not a dict of the three kinds", seen=str(e),
                           expected='{"params": ..., "grads": ..., "optimizer": ...}',
                           hint="return a dict with those three keys, bytes as numbers")
    if got["params"] != 4000:
        return CheckResult(name, 0, 1, "1000 float32 parameters on one rank",
                           expected="params 4000 bytes", seen=f"{got['params']:g}",
                           hint="bytes, not values: 4 bytes per float32 value")
    try:
        example = normalise_memory(call(fn, 1000, 4, 1))
    except (StudentError, TypeError, ValueError) as e:
        return CheckResult(name, 0, 1, str(e), hint="run zero_bytes(1000, 4, 1) in a cell")
    want = {"params": 4000, "grads": 4000, "optimizer": 2000}   # the notebook's example
    if any(abs(example[k] - want[k]) > 8 for k in KINDS):
        return CheckResult(name, 0, 1, "not the notebook's example",
                           expected=f"zero_bytes(1000, 4, 1) == {want}",
                           seen=str({k: example[k] for k in KINDS}),
                           hint="Task 1's example: at stage 1 only the optimizer state is "
                                "split over the 4 ranks", advisory=True)
    return CheckResult(name, 1, 1, "returns the three kinds, and the notebook's example "
                       "(the graded tests try every stage on other models)")


def public_one_f_one_b(fn: Callable) -> CheckResult:
    """Lenient: one list per stage, each with a forward and a backward of every
    micro-batch."""
    name = "a9 (public): one_f_one_b lists every pass of every stage"
    try:
        got = normalise_schedule(call(fn, 2, 4), 2)
    except StudentError as e:
        return CheckResult(name, 0, 1, str(e), hint="run one_f_one_b(2, 4) in a cell")
    except (TypeError, ValueError) as e:
        return CheckResult(name, 0, 1, "not one list of passes per stage", seen=str(e),
                           expected='[["F0", "F1", ...], [...]]',
                           hint="return a list with one list per stage")
    want = sorted([("F", i) for i in range(4)] + [("B", i) for i in range(4)])
    bad = [s for s, ops in enumerate(got) if sorted(ops) != want]
    if bad:
        return CheckResult(name, 0, 1, "a stage does not run each pass exactly once",
                           expected="F0..F3 and B0..B3 on each stage",
                           seen=f"stage(s) {bad}: {[got[s] for s in bad]}",
                           hint="every stage runs the forward and the backward of every "
                                "micro-batch once")
    example = [["F0", "F1", "B0", "F2", "B1", "B2"], ["F0", "B0", "F1", "B1", "F2", "B2"]]
    try:
        seen = normalise_schedule(call(fn, 2, 3), 2)
    except (StudentError, TypeError, ValueError) as e:
        return CheckResult(name, 0, 1, str(e), hint="run one_f_one_b(2, 3) in a cell")
    if seen != normalise_schedule(example, 2):
        return CheckResult(name, 0, 1, "not the notebook's example",
                           expected=f"one_f_one_b(2, 3) == {example}",
                           seen=str([[f"{k}{i}" for k, i in ops] for ops in seen]),
                           hint="stage s runs stages - s - 1 forwards, then one forward and one "
                                "backward in turn, then the backwards that are left", advisory=True)
    return CheckResult(name, 1, 1, "every pass once on each stage, and the notebook's example "
                       "(the graded tests run other pipelines on a clock)")
