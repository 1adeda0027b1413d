"""Verdicts students cannot forge: test cells run in nbgrader's process, not in the kernel.

With nbgrader's ``Execute``, a test cell such as ``grade(checks.check_time_work(time_work))``
runs in the student's kernel after the student's code, which can redefine ``grade``, patch
``grader.checks``, ``AssertionError`` or IPython's traceback display, or print a fake score.
:class:`JudgedExecute` (in place of :class:`~grader.grading.crashes.GuardedExecute`, whose
crash handling it keeps) runs the notebook cell by cell in the kernel as before, except:

- **test cells** (autograded grade cells: ``grade`` and not ``solution`` *in the gradebook*,
  whatever the submitted metadata says) are never sent to the kernel. Their source is the
  instructor's, read from the gradebook (nbgrader's ``OverwriteCells`` has restored it in the
  notebook too). The *judge* (this process, which never runs student code) runs it in its
  own namespace and writes the cell's outputs itself, in the shapes a kernel produces:
  ``stream`` outputs for what it prints, an ``execute_result`` (``text/plain`` repr) for the
  last expression's value, so nbgrader's ``determine_grade`` reads the points, an ``error``
  output (``ename``, ``evalue``, ``traceback``) for an exception, so the cell scores 0.
  nbgrader's ``SaveAutoGrades``, feedback and
  :class:`~grader.grading.feedback.StripTestTracebacks` work unchanged.
- **locked cells** that are neither tests nor answers (the imports cell) run in the kernel
  *and* in the judge's namespace, so ``checks``, ``grade`` and ``public`` are the judge's own.
- a name the judge's namespace does not define (the student's functions, ``FRAMEWORK``) is
  looked up in the kernel when the test cell uses it, and arrives as data or as a proxy that
  calls into the kernel (:mod:`grader.grading.remote`): only data crosses back.

Per test cell: the judge asks the kernel (an execute request that is not recorded) to run
:func:`grader.grading.remote.serve`, connects to the socket it creates in the kernel's folder,
runs the cell, and says stop. What the student's functions print in the kernel meanwhile is
added to the cell's streams in time order, as in a kernel (stream outputs can only lower a score:
nbgrader gives 0 for a cell with ``stderr`` output, and reads points from ``execute_result``
only, which only the judge writes).

Limits: the cell's time limit (``Execute.timeout``) bounds every wait for the kernel; past it
the kernel is interrupted and the cell gets nbgrader's ``CellTimeoutError`` output. A kernel
that dies during a test cell (``os._exit`` in the student's function) raises nbclient's
``DeadKernelError``, and the pipeline's crash rounds (:mod:`grader.grading.crashes`) skip the
cell, as before. A kernel that does not come back after the interrupt is shut down the same way.

:func:`autograde_args` mirrors :func:`grader.grading.crashes.autograde_args`.
"""
from __future__ import annotations

import ast
import asyncio
import builtins
import linecache
import secrets
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync
from nbformat import NotebookNode
from nbformat.v4 import new_output

from . import crashes
from .crashes import GuardedExecute
from .remote import Channel, ChannelClosed, RemoteTimeout, bootstrap_code, connect

__all__ = ["JudgedExecute", "autograde_args", "run_cell_source", "CellNamespace"]

GRACE_S = 10.0          # how long a stopped or interrupted kernel may take to answer
_OWN_FILES = ("judge.py", "remote.py", "wire.py")


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
    into the cell; any other thread of this process (a grading worker's heartbeat printing an
    error) still writes where it did: a stray ``stderr`` line would cost the student the cell."""

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
        exec(compile(tree, filename, "exec"), ns)
        if last is not None:
            value = eval(compile(last, filename, "eval"), ns)
    except (RemoteTimeout, ChannelClosed) as e:
        error = e
    except BaseException as e:  # noqa: BLE001 - the cell's error output, as in a kernel
        error = e
    finally:
        sys.stdout, sys.stderr = old
    return streams, value, error


def _error_output(e: BaseException) -> NotebookNode:
    tb = traceback.TracebackException.from_exception(e)
    tb.stack = traceback.StackSummary.from_list(
        [f for f in tb.stack if not f.filename.endswith(_OWN_FILES)])
    lines = [line.rstrip("\n") for line in tb.format()]
    return new_output("error", ename=type(e).__name__, evalue=str(e), traceback=lines)


def _streams(items: list) -> list[NotebookNode]:
    out: list[NotebookNode] = []
    for _, name, text in sorted(items, key=lambda x: x[0]):
        if out and out[-1].name == name:
            out[-1].text += text
        elif text:
            out.append(new_output("stream", name=name, text=text))
    return out


class JudgedExecute(GuardedExecute):
    """nbgrader's ``Execute`` (with :class:`GuardedExecute`'s crash handling) that runs test
    cells in this process; see the module docstring."""

    def preprocess(self, nb, resources=None, km=None):
        course_id = self.config.get("CourseDirectory", {}).get("course_id", "default_course")
        self._roles, self._sources = _roles(nb, resources or {}, self.skip_cells, course_id)
        if not self._roles:
            self.log.warning("JudgedExecute: the gradebook names no test cell in this notebook")
        self._base: dict = {"__name__": "__judge__", "__builtins__": builtins}
        self._folder = str((resources or {}).get("metadata", {}).get("path") or ".")
        return super().preprocess(nb, resources, km)

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        role = getattr(self, "_roles", {}).get(cell_index)
        if role == "test" and cell.cell_type == "code":
            return await self._judge(cell, cell_index)
        out = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        if role == "locked":
            # the judge's namespace gets the instructor's imports too; a failure here shows
            # up in the test cells that need the names
            run_cell_source(self._sources[cell_index], self._base, f"<locked cell {cell_index + 1}>")
        return out

    # nbclient binds the synchronous name to its own coroutine at class creation
    execute_cell = run_sync(async_execute_cell)

    async def _judge(self, cell: NotebookNode, index: int) -> NotebookNode:
        from nbclient.util import run_hook

        await run_hook(self.on_cell_start, cell=cell, cell_index=index)
        await run_hook(self.on_cell_execute, cell=cell, cell_index=index)   # the crash trace
        cell.outputs = []
        timeout = self._get_timeout(cell) or 3600
        deadline = time.monotonic() + timeout
        name = f".grading-{secrets.token_hex(8)}.sock"
        msg_id = self.kc.execute(bootstrap_code(name), silent=True, store_history=False,
                                 allow_stdin=False, stop_on_error=False)
        kernel_streams: list = []
        iopub = asyncio.ensure_future(self._kernel_output(msg_id, kernel_streams))
        reply = asyncio.ensure_future(self._kernel_reply(msg_id))
        dead, state = threading.Event(), {}
        done = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()

        def judge() -> None:
            result: tuple = ([], None, None)
            try:
                channel = connect(self._folder, name, deadline,
                                  alive=lambda: not dead.is_set() and not reply.done())
                state["channel"] = channel
                channel.deadline = deadline
                gid = cell.metadata.get("nbgrader", {}).get("grade_id", index)
                result = run_cell_source(self._sources[index], CellNamespace(self._base, channel),
                                         f"<test cell {gid}>")
                channel.stop()
            except BaseException as e:  # noqa: BLE001 - reported as the cell's outcome
                result = ([], None, e)
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(result))

        streams_before = sys.stdout, sys.stderr
        threading.Thread(target=judge, name=f"judge-cell-{index}", daemon=True).start()
        streams, value, error = await self._watch(done, dead, state, deadline)
        if error is _HUNG:     # the abandoned thread still holds the captured streams
            sys.stdout, sys.stderr = streams_before
        timed_out = isinstance(error, RemoteTimeout) or error is _HUNG
        if timed_out and not dead.is_set():
            await self._ensure_async(self.km.interrupt_kernel())
        if not dead.is_set() and not await self._finished(reply, iopub):
            dead.set()
        iopub.cancel()
        reply.cancel()
        if dead.is_set():
            raise DeadKernelError(f"Kernel died while cell {index + 1} was judged")
        cell.outputs = _streams(streams + kernel_streams)
        if timed_out:
            cell.outputs.append(new_output("error", **self.error_on_timeout))
        elif error is not None:
            cell.outputs.append(_error_output(error))
        elif value is not None:
            cell.outputs.append(new_output("execute_result", data={"text/plain": repr(value)},
                                           execution_count=None))
        await run_hook(self.on_cell_complete, cell=cell, cell_index=index)
        errors = [o for o in cell.outputs if o.output_type == "error"]
        content = ({"status": "error", "ename": errors[0].ename, "evalue": errors[0].evalue,
                    "traceback": errors[0].traceback} if errors else {"status": "ok"})
        await run_hook(self.on_cell_executed, cell=cell, cell_index=index,
                       execute_reply={"content": content})
        return cell

    async def _watch(self, done, dead: threading.Event, state: dict, deadline: float):
        """Wait for the judge's thread; notice a dead kernel and a judge stuck past the limit."""
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(done), 0.5)
            except asyncio.TimeoutError:
                pass
            if not await self._alive():
                dead.set()
                if "channel" in state:
                    state["channel"].close()
            if time.monotonic() > deadline + GRACE_S:   # judge code itself never returned
                if "channel" in state:
                    state["channel"].close()
                return [], None, _HUNG

    async def _finished(self, reply, iopub) -> bool:
        """Wait for the kernel to leave ``serve`` and for its output; ``False`` if it died, or
        did not come back within ``GRACE_S`` (then it is shut down: a kernel that ignores the
        interrupt is treated like one that died)."""
        end = time.monotonic() + GRACE_S
        while not reply.done():
            if not await self._alive():
                return False
            if time.monotonic() > end:
                await self._ensure_async(self.km.shutdown_kernel(now=True))
                return False
            await asyncio.sleep(0.05)
        try:
            await asyncio.wait_for(asyncio.shield(iopub), self.iopub_timeout)
        except asyncio.TimeoutError:
            self.log.warning("JudgedExecute: timeout waiting for the kernel's output")
        return True

    async def _alive(self) -> bool:
        return bool(await self._ensure_async(self.kc.is_alive()))

    @staticmethod
    async def _ensure_async(x):
        from nbclient.util import ensure_async

        return await ensure_async(x)

    async def _kernel_output(self, msg_id: str, sink: list) -> None:
        while True:
            msg = await self._ensure_async(self.kc.iopub_channel.get_msg(timeout=None))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            content = msg["content"]
            if msg["msg_type"] == "stream":
                when = msg["header"].get("date")
                stamp = when.timestamp() if hasattr(when, "timestamp") else time.time()
                sink.append((stamp, "stderr" if content.get("name") == "stderr" else "stdout",
                             str(content.get("text", ""))[:100_000]))
            elif msg["msg_type"] == "status" and content.get("execution_state") == "idle":
                return

    async def _kernel_reply(self, msg_id: str) -> dict:
        while True:
            msg = await self._ensure_async(self.kc.shell_channel.get_msg(timeout=None))
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg


class _Hung(BaseException):
    pass


_HUNG = _Hung("the test ran past its time limit")


def _roles(nb, resources: dict, skip_cells: str, course_id: str) -> tuple[dict[int, str], dict[int, str]]:
    """``{index: "test"|"locked"}`` and the trusted source of those cells, from the gradebook
    (the submitted metadata can be edited; the gradebook holds the instructor's notebook)."""
    from nbgrader.api import Gradebook, MissingEntry

    info = resources.get("nbgrader", {})
    skip = {int(i) for i in skip_cells.split(",") if i.strip()}
    with Gradebook(info["db_url"], course_id) as gb:
        try:
            notebook = gb.find_notebook(info["notebook"], info["assignment"])
        except MissingEntry:
            return {}, {}
        tests = {c.name for c in notebook.grade_cells} - {c.name for c in notebook.solution_cells}
        answers = {c.name for c in notebook.solution_cells}
        source = {c.name: (c.source, c.locked, c.cell_type) for c in notebook.source_cells}
    roles, sources = {}, {}
    for i, cell in enumerate(nb.cells):
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid not in source or source[gid][2] != "code":
            continue
        if gid in tests:
            roles[i] = "test"
        elif source[gid][1] and gid not in answers:
            roles[i] = "locked"
        else:
            continue
        # a cell that ended the kernel in an earlier round runs GuardedExecute's raise
        sources[i] = crashes.replacement(crashes.describe(i, cell.metadata)) if i in skip else source[gid][0]
    return roles, sources


def autograde_args(trace_file: Path, skip: list[tuple[int, str]]) -> list[str]:
    """nbgrader command-line options putting :class:`JudgedExecute` in place of ``Execute``
    (as :func:`grader.grading.crashes.autograde_args` does for ``GuardedExecute``)."""
    args = crashes.autograde_args(trace_file, skip)
    own = f"{JudgedExecute.__module__}.{JudgedExecute.__qualname__}"
    guarded = f"{GuardedExecute.__module__}.{GuardedExecute.__qualname__}"
    return [a.replace(guarded, own).replace("--GuardedExecute.", "--JudgedExecute.") for a in args]
