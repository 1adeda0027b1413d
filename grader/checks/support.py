"""What every assignment's checks share: calling student code safely, comparing numbers,
and turning results into the points a grade cell reports.

A hidden test cell ends with ``grade(...)``: it prints every result's message (what
feedback shows) and evaluates to the points, which nbgrader reads as partial credit
(``nbgrader.utils.determine_grade``: a cell whose result is a number scores that number).

A test cell's quick ``public(...)`` check never stops its cell: the hidden checks below it
grade every task on their own inputs (a10's ``tp_mlp`` with the course's f and g), and a
raise there cost them all. Where it runs decides how its failure shows (:func:`public`).
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import traceback
import warnings
from typing import Any, Callable

from .result import CheckResult, total

__all__ = ["grade", "call", "attempt", "close", "StudentError", "public", "result", "judging"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # grader/


class StudentError(Exception):
    """The student's function raised; ``str`` is one line saying what and where."""


def call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call a student's function; any exception becomes a :class:`StudentError` whose
    message names it (and the last line of the student's code that raised it)."""
    if not callable(fn):
        raise StudentError(f"expected a function, got {type(fn).__name__}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a warning would go to stderr: zero points
            return fn(*args, **kwargs)
    except NotImplementedError:
        raise StudentError(f"{getattr(fn, '__name__', 'your function')} is not implemented yet") from None
    except MemoryError:
        raise  # not a wrong answer: the grading pipeline reports the memory limit
    except Exception as e:  # noqa: BLE001 - any failure of student code is reported, not raised
        # Graded through the judge (grader.grading.judge.channel), the student's code ran in the
        # kernel: the exception arrives with the student's line in ``where``.
        remote = isinstance(getattr(e, "where", None), str)
        where = e.where if remote else ""
        # in one process: the student's last line, not a line of the course's own code
        # (a simulated framework raising on the student's behalf)
        frames = [] if remote else [f for f in traceback.extract_tb(e.__traceback__)
                                    if not os.path.abspath(f.filename).startswith(_PACKAGE)]
        if frames:
            f = frames[-1]
            where = f" (line {f.lineno}: {f.line})" if f.line else ""
        raise StudentError(f"{getattr(fn, '__name__', 'your function')} raised "
                           f"{type(e).__name__}: {e}{where}") from None


def attempt(read: Callable[[Any], Any], fn: Callable, *args: Any, **kwargs: Any) -> tuple[Any, str]:
    """One case of a hidden check: ``(read(fn(*args, **kwargs)), "")``, or ``(None, why)``
    when the student's function raised (:func:`call`) or ``read`` could not read what it
    returned (any ``Exception`` but ``MemoryError``). A check calls each case on its own, so
    that an error costs exactly the parts whose cases call the broken code, and says which
    case."""
    try:
        return read(call(fn, *args, **kwargs)), ""
    except StudentError as e:
        return None, str(e)
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - what the student returned, read by course code
        return None, f"{getattr(fn, '__name__', 'your function')} returned what the task "\
                     f"does not ask for: {e}"


def close(seen: Any, expected: float, rtol: float = 0.05) -> bool:
    try:
        seen = float(seen)
    except (TypeError, ValueError):
        return False
    return math.isfinite(seen) and abs(seen - expected) <= rtol * abs(expected)


def result(name: str, max_points: float, parts: list[tuple[float, bool, str, str, str, str]],
           ok_message: str) -> CheckResult:
    """Combine independent parts ``(points, passed, what, expected, seen, hint)`` into one
    result with partial credit; the message lists what failed."""
    got = sum(p for p, ok, *_ in parts if ok)
    failed = [(what, exp, seen, hint) for _, ok, what, exp, seen, hint in parts if not ok]
    if not failed:
        return CheckResult(name, got, max_points, ok_message)
    what, exp, seen, hint = failed[0]
    details = tuple(f"also: {w} (expected {e}; seen {s}) - {h}" for w, e, s, h in failed[1:])
    return CheckResult(name, min(got, max_points), max_points, what, expected=exp, seen=seen,
                       hint=hint, details=details)


def failed(name: str, max_points: float, err: Exception, hint: str = "") -> CheckResult:
    return CheckResult(name, 0, max_points, str(err), hint=hint or
                       "run the public check above in your notebook to see the error")


def grade(*results: CheckResult) -> float:
    """Print each result (the feedback the student sees) and return the points."""
    for r in results:
        print(r.text())
    got, _ = total(list(results))
    return round(got, 6)


_JUDGING = [0]      # > 0 while the judge runs a cell (grader.grading.judge.cells)
PUBLIC_NOTE = ("(quick check only, no points: when graded, the hidden tests give the points "
               "whatever this check says)")


@contextlib.contextmanager
def judging():
    """While the judge runs a test cell (:func:`grader.grading.judge.cells.run_cell_source`):
    a failing public check is printed to ``stdout`` there, never ``stderr``, which would
    make nbgrader score the whole cell 0 (``determine_grade``)."""
    _JUDGING[0] += 1
    try:
        yield
    finally:
        _JUDGING[0] -= 1


def public(res: CheckResult) -> None:
    """A public check in a student notebook: print the result, without points (it is quick
    feedback, not a grade: the hidden tests give the points). It never raises, so neither the
    hidden checks below it in its cell nor Run All stop at it.

    A failing result is written to ``stderr`` in a kernel (the student's, ``nbgrader
    validate``'s): the student reads the message, with no traceback, in the cell's red
    output, and ``validate`` fails the cell (nbgrader counts a grade cell that wrote to
    ``stderr`` as failed; ``validate --invert`` needs the released stubs to fail every test
    cell). An ``advisory`` result (the answer runs but is not what the notebook's example
    shows) goes to ``stdout`` and fails nothing. When graded, the judge runs the cell
    (:func:`judging`): every result goes to ``stdout``, the cell's points are what the hidden
    checks' ``grade(...)`` returns, and the feedback shows both."""
    if res.passed:
        print(res.text(points=False))
        return
    text = res.text(points=False) + "\n" + PUBLIC_NOTE
    quiet = res.advisory or _JUDGING[0] > 0
    print(text, file=sys.stdout if quiet else sys.stderr)
