"""Running one cell's source in the judge as IPython would run it in a kernel.

The judge process (:mod:`grader.grading.judge.process`) runs the instructor's locked cells and
test cells with :func:`run_cell_source` in a :class:`CellNamespace` (the judge's names first,
the student's fetched from the kernel over the channel), captures what the cell prints,
bounded by :func:`bounded_streams`, and turns an exception into an ``error`` output's fields
(:func:`error_fields`, the judge's own frames left out). A cell runs under
:func:`grader.checks.support.judging`: a failing public check prints its verdict to ``stdout``
and the cell goes on to its hidden checks, whose ``grade(...)`` gives the points; and a test
cell runs as its quick part, then its hidden block (:func:`run_test_cell`), so that not even
a public check that raises stops the hidden checks.
"""
from __future__ import annotations

import ast
import builtins
import linecache
import os
import sys
import threading
import time
import traceback
from typing import Any

from ...checks.support import judging
from .channel import Channel

__all__ = ["CellNamespace", "run_cell_source", "run_test_cell", "error_fields",
           "bounded_streams", "MAX_STREAM_CHARS", "HIDDEN_MARK"]

MAX_STREAM_CHARS = 1_000_000    # what one test cell may print, in the judge and the kernel
HIDDEN_MARK = "### BEGIN HIDDEN TESTS"      # nbgrader's: a test cell's hidden block starts
_OWN_FILES = tuple(os.path.join("grading", "judge", name)    # the judge's frames, left out
                   for name in ("executor.py", "process.py", "cells.py", "channel.py"))
_WIRE = os.sep + os.path.join("grader", "wire") + os.sep


class CellNamespace(dict):
    """The judge's globals for one test cell: its own names first; any other name that is
    not a built-in is looked up in the kernel (and kept for the rest of the cell)."""

    def __init__(self, base: dict, channel: Channel | None) -> None:
        super().__init__(base)
        self.channel = channel

    def __missing__(self, key: str) -> Any:
        if self.channel is None or key in builtins.__dict__:
            raise KeyError(key)
        try:
            value = self.channel.request("global", name=key)
        except NameError:
            raise KeyError(key) from None
        self[key] = value
        return value

    def get(self, key: str, default: Any = None) -> Any:   # globals().get("FRAMEWORK", ...)
        try:
            return self[key]
        except KeyError:
            return default


class _Capture:
    """Stands in for ``sys.stdout`` / ``sys.stderr`` while a test cell runs in the judge. Only
    the cell's own threads (the one running it, and those answering the kernel's calls) write
    into the cell; any other thread of this process still writes where it did: a stray
    ``stderr`` line would cost the student the cell."""

    def __init__(self, name: str, sink: list, lock: threading.Lock, owner: threading.Thread,
                 original) -> None:
        self.name, self.sink, self.lock, self.owner, self.original = name, sink, lock, owner, original

    def write(self, text: str) -> int:
        me = threading.current_thread()
        if me is not self.owner and not me.name.startswith("remote-j"):
            return self.original.write(text)
        with self.lock:
            self.sink.append((time.time(), self.name, str(text)))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def run_cell_source(source: str, ns: dict, filename: str = "<test cell>") -> tuple[list, Any, BaseException | None]:
    """Run ``source`` as IPython would run a cell: ``(streams, value, exception)``, where
    ``streams`` is ``[(time, "stdout"|"stderr", text)]`` and ``value`` the last expression's
    value (``None`` when there is none, or the cell ends with ``;``)."""
    streams: list = []
    lock = threading.Lock()
    old = sys.stdout, sys.stderr
    me = threading.current_thread()
    sys.stdout = _Capture("stdout", streams, lock, me, old[0])
    sys.stderr = _Capture("stderr", streams, lock, me, old[1])
    value, error = None, None
    try:
        lines = source.splitlines(keepends=True)
        linecache.cache[filename] = (len(source), None, lines, filename)
        tree = ast.parse(source, filename)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
            last = ast.Expression(tree.body.pop().value)
        with judging():
            exec(compile(tree, filename, "exec"), ns)
            if last is not None:
                value = eval(compile(last, filename, "eval"), ns)
    except BaseException as e:  # noqa: BLE001 - the cell's error output, as in a kernel
        error = e
    finally:
        sys.stdout, sys.stderr = old
    return streams, value, error


def run_test_cell(source: str, ns: dict, filename: str = "<test cell>") -> tuple[list, Any, BaseException | None]:
    """A test cell as the judge grades it: :func:`run_cell_source` on the quick checks above
    its hidden block, then on the hidden block (lines numbered as in the cell), whose value
    is the cell's. A quick check that raises (``public()`` itself never does; a public check
    can, on what a student's function returned) is told on ``stdout`` and the hidden block
    still runs: it grades the cell. Not an ``Exception`` (the judge's time limit, a closed
    channel) or a ``MemoryError`` ends the cell there, as in one run."""
    head, mark, tail = source.partition(HIDDEN_MARK)
    if not mark or not head.strip():
        return run_cell_source(source, ns, filename)
    streams, _, error = run_cell_source(head, ns, filename)
    if error is not None:
        if not isinstance(error, Exception) or isinstance(error, MemoryError):
            return streams, None, error
        streams.append((time.time(), "stdout",
                        f"[FAIL] the quick check above could not run: {type(error).__name__}: "
                        f"{str(error)[:2000]}\n(no points: the hidden tests below grade this "
                        "cell)\n"))
    more, value, error = run_cell_source("\n" * head.count("\n") + mark + tail, ns, filename)
    return streams + more, value, error


def error_fields(e: BaseException) -> dict:
    """An ``error`` output's fields for ``e`` (the judge's own frames left out)."""
    tb = traceback.TracebackException.from_exception(e)
    tb.stack = traceback.StackSummary.from_list(
        [f for f in tb.stack if not f.filename.endswith(_OWN_FILES) and _WIRE not in f.filename])
    lines = [line.rstrip("\n")[:10_000] for line in tb.format()][-200:]
    return {"ename": type(e).__name__, "evalue": str(e)[:10_000], "traceback": lines}


def bounded_streams(items: list, limit: int = MAX_STREAM_CHARS) -> list:
    """``items`` (``(time, name, text)``) up to ``limit`` characters, and a note where cut."""
    out, left = [], limit
    for when, name, text in items:
        if left <= 0:
            break
        if len(text) > left:
            text = text[:left] + f"\n[output cut: a test cell may print {limit} characters]\n"
        left -= len(text)
        out.append((when, name, text))
    return out
