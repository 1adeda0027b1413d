"""What the checks of assignments 1-5 share: answers are framework code, run on a simulated
GPU (:mod:`grader.sim`) of the framework the notebook names.

An answer takes the framework module as its first argument (``def f(torch, ...)``); the
notebook says which framework in ``FRAMEWORK`` (``"torch"`` or ``"paddle"``). The checks
hand the answer a fresh simulated module, keep the machine it runs on, and read there what
the answer did. This module holds nothing a student could not read in the instructions.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..sim import Costs, FRAMEWORKS, Machine, simulate
from .result import CheckResult
from .support import StudentError

__all__ = ["fresh", "framework_problem", "is_number", "ms", "NAMES", "student_failed",
           "FRAMEWORKS", "stopped_early"]

# How each framework spells what hints name.
NAMES = {
    "torch": {"sync": "torch.cuda.synchronize()", "event": "torch.cuda.Event(enable_timing=True)",
              "stream": "torch.cuda.Stream()", "use_stream": "with torch.cuda.stream(s):",
              "current": "torch.cuda.current_stream()",
              "to_pinned": "y.to('cpu', non_blocking=True)",
              "pinned_buffer": "torch.empty(y.shape, pin_memory=True).copy_(y, non_blocking=True)",
              "copy_to": "u.to(other_device, non_blocking=True)", "host": "y.cpu()"},
    "paddle": {"sync": "paddle.device.synchronize()",
               "event": "paddle.device.Event(enable_timing=True)",
               "stream": "paddle.device.Stream()",
               "use_stream": "with paddle.device.stream_guard(s):",
               "current": "paddle.device.current_stream()",
               "to_pinned": "y.pin_memory(blocking=False)",
               "pinned_buffer": "y.to(paddle.CUDAPinnedPlace(), blocking=False)",
               "copy_to": "u.to(other_device, blocking=False)", "host": "y.cpu()"},
}


def fresh(framework: str, gpus: int = 1, parallel: bool = False, wrong_device: str = "raise",
          **costs: Any) -> tuple[Any, Machine]:
    """A new simulated framework module and the machine it runs on."""
    return simulate(framework, gpus, Costs(**costs), parallel=parallel,
                    wrong_device=wrong_device)


def framework_problem(name: str, points: float, framework: Any) -> CheckResult | None:
    """A zero-point result when ``FRAMEWORK`` is not one the assignment offers."""
    if isinstance(framework, str) and framework in FRAMEWORKS:
        return None
    return CheckResult(name, 0, points, "FRAMEWORK must be 'torch' or 'paddle'",
                       seen=repr(framework) if isinstance(framework, str) else
                       type(framework).__name__,
                       hint="set FRAMEWORK at the top of the first answer cell")


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) \
        and math.isfinite(float(x))


def ms(t: Any, digits: int = 3) -> str:
    return f"{float(t) * 1e3:.{digits}f} ms" if is_number(t) else _kind(t)


def _kind(x: Any) -> str:
    if isinstance(x, (str, bool)) or x is None:
        return repr(x)
    return f"a {type(x).__name__}"


def student_failed(name: str, points: float, err: StudentError, framework: str) -> CheckResult:
    """The answer raised: the message names what and where; the hint says what the error
    usually means here."""
    text, n = str(err), NAMES.get(framework, NAMES["torch"])
    if "not implemented" in text:
        hint = "write the function (the released notebook has only its signature)"
    elif "device not ready" in text:
        hint = ("elapsed_time needs both events to have happened: wait for the end event "
                f"(end.synchronize() or {n['sync']}) before calling it")
    elif "does not model" in text:
        hint = ("use only the parts of the framework the instructions list (the simulated GPU "
                "models those)")
    elif "same device" in text or "different places" in text:
        hint = "copy a tensor to the device of the other operand before combining them"
    elif "can't convert" in text and "numpy" in text:
        hint = f"copy a GPU tensor to the host ({n['host']}) before .numpy()"
    else:
        hint = "run the public check above in your notebook to see the error"
    return CheckResult(name, 0, points, text, hint=hint)


def stopped_early(name: str, t: Any, m: Machine, t0_ns: int, framework: str) -> CheckResult | None:
    """A public check's advisory finding when the time an answer returned is less than half
    of what the simulated device recorded for the work it queued (from ``t0_ns``): the clock
    was read before the GPU had finished. ``None`` otherwise."""
    ops = [o for o in m.ops if o.launched_ns >= t0_ns]
    if not ops or not is_number(t):
        return None
    span = (max(o.end_ns for o in ops) - min(o.launched_ns for o in ops)) / 1e9
    if float(t) >= span / 2:
        return None
    return CheckResult(name, 0, 1, f"{ms(t)}, but the GPU worked for {ms(span)}",
                       expected=f"about {ms(span)} (until the work is done)", seen=ms(t),
                       hint="the clock was read before the GPU had finished: "
                            f"{NAMES.get(framework, NAMES['torch'])['sync']} before reading it",
                       advisory=True)
