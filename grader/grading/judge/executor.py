"""Verdicts students cannot forge: test cells run in a judge process, not in the kernel.

With nbgrader's ``Execute``, a test cell such as ``grade(checks.check_time_work(time_work))``
runs in the student's kernel after the student's code, which can redefine ``grade``, patch
``grader.checks``, ``AssertionError`` or IPython's traceback display, or print a fake score.
:class:`JudgedExecute` (in place of :class:`~grader.grading.sandbox.crashes.GuardedExecute`, whose
crash handling it keeps) runs the notebook cell by cell in the kernel as before, except:

- **test cells** (autograded grade cells: ``grade`` and not ``solution`` *in the gradebook*,
  whatever the submitted metadata says) are never sent to the kernel. Their source is the
  instructor's, read from the gradebook (nbgrader's ``OverwriteCells`` has restored it in the
  notebook too). The *judge* runs it in its own namespace, in a process of this notebook's
  own that never runs student code (:mod:`grader.grading.judge.process`), and this process
  writes the cell's outputs from its answer, in the shapes a kernel produces:
  ``stream`` outputs for what it prints, an ``execute_result`` (``text/plain`` repr) for the
  last expression's value, so nbgrader's ``determine_grade`` reads the points, an ``error``
  output (``ename``, ``evalue``, ``traceback``) for an exception, so the cell scores 0.
  nbgrader's ``SaveAutoGrades``, feedback and
  :class:`~grader.grading.submission.feedback.StripTestTracebacks` work unchanged.
- **locked cells** that are neither tests nor answers (the imports cell) run in the kernel
  *and* in the judge's namespace, so ``checks``, ``grade`` and ``public`` are the judge's own.
- **ranks**: a check that runs the student's code on several ranks (assignment 7) runs
  each rank in a sandbox of its own, like the kernel's but alone, when the kernel is
  sandboxed (:mod:`grader.grading.sandbox.rank`, :mod:`grader.ranks.relay`).
- a name the judge's namespace does not define (the student's functions, ``FRAMEWORK``) is
  looked up in the kernel when the test cell uses it, and arrives as data or as a proxy that
  calls into the kernel (:mod:`grader.grading.judge.channel`): only data crosses back.

Per test cell: this process asks the kernel (an execute request that is not recorded) to run
:func:`grader.grading.judge.channel.serve`; the judge process connects to the socket it creates in
the kernel's folder, runs the cell, says stop and answers with the outputs. What the
student's functions print in the kernel meanwhile is added to the cell's streams in time
order, as in a kernel (stream outputs can only lower a score: nbgrader gives 0 for a cell
with ``stderr`` output, and reads points from ``execute_result`` only, which only the judge
writes); a test cell's streams keep at most ``MAX_STREAM_CHARS`` characters from each side.

Threads: the judge process runs each cell in its main thread, and answers the kernel's calls
in more; each first turns on Paddle's dynamic-graph mode, which Paddle keeps per thread
(:func:`grader.lab.core.threads.framework_ready`).

Limits: the cell's time limit (``Execute.timeout``) bounds every wait for the kernel; past it
the kernel is interrupted and the cell gets nbgrader's ``CellTimeoutError`` output. A judge
process that has not answered ``GRACE_S`` after the limit (a check stuck on what the kernel
sent) is killed, with everything it started, and the cell gets the same output; a judge
process that ends without an answer gives the cell a ``JudgeError`` output saying so. Either
way the cell scores 0 and the next cell gets a fresh judge process. Nothing the kernel sends
is decoded in this process, so nothing it sends can stall it (or a grading worker's lease).
A kernel that dies during a test cell (``os._exit`` in the student's function) raises
nbclient's ``DeadKernelError``, and the pipeline's crash rounds (:mod:`grader.grading.sandbox.crashes`)
skip the cell, as before. A kernel that does not come back after the interrupt is shut down
the same way.

Its nbgrader configuration (limits, crash trace) is
:func:`grader.grading.sandbox.crashes.autograde_config`'s.
"""
from __future__ import annotations

import asyncio
import os
import secrets
import time

from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync
from nbformat import NotebookNode
from nbformat.v4 import new_output
from traitlets import Integer

from ..sandbox import crashes, rank
from ..sandbox.crashes import GuardedExecute
from .cells import (MAX_STREAM_CHARS, CellNamespace, bounded_streams, error_fields,
                          run_cell_source)
from .process import JudgeProcess
from .channel import bootstrap_code

__all__ = ["JudgedExecute", "run_cell_source", "CellNamespace"]

GRACE_S = 10.0          # how long a stopped or interrupted kernel, or the judge, may be late


def _error_output(e: BaseException) -> NotebookNode:
    return new_output("error", **error_fields(e))


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
    cells in a judge process of this notebook's own; see the module docstring."""

    judge_memory_bytes = Integer(0, help="memory limit of the control group each judge "
                                 "process runs in, with what it starts (0: none)").tag(config=True)
    judge_processes = Integer(0, help="process limit of that group (0: the judge's "
                              "RLIMIT_NPROC)").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        course = self.config.get("CourseDirectory", {})
        course_id = course.get("course_id", "default_course")
        self._roles, self._sources = _roles(nb, resources or {}, self.skip_cells, course_id)
        if not self._roles:
            self.log.warning("JudgedExecute: the gradebook names no test cell in this notebook")
        self._folder = str((resources or {}).get("metadata", {}).get("path") or ".")
        # the hidden checks a test cell's hidden block loads live in the course folder: the
        # judge process registers it (grader.grading.hidden)
        root = str(course.get("root") or os.getcwd())
        self._judge_process = (JudgeProcess(course_root=root,
                                            kernel_folder=os.path.abspath(self._folder),
                                            memory_bytes=self.judge_memory_bytes,
                                            processes=self.judge_processes)
                               if self._roles else None)
        try:
            return super().preprocess(nb, resources, km)
        finally:
            if self._judge_process is not None:
                self._judge_process.close()

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        role = getattr(self, "_roles", {}).get(cell_index)
        if role == "test" and cell.cell_type == "code":
            return await self._judge(cell, cell_index)
        out = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        if role == "locked":
            # the judge's namespace gets the instructor's imports too; a failure there shows
            # up in the test cells that need the names
            self._judge_process.locked(self._sources[cell_index], f"<locked cell {cell_index + 1}>")
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
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", index)
        answer, dead = await self._run_in_judge(reply, deadline, {
            "op": "test", "source": self._sources[index], "filename": f"<test cell {gid}>",
            "folder": self._folder, "socket": name, "deadline": deadline,
            "env": self._rank_isolation()})
        timed_out = answer is _HUNG or answer["timeout"]
        if timed_out and not dead:
            await self._ensure_async(self.km.interrupt_kernel())
        if not dead and not await self._finished(reply, iopub):
            dead = True
        iopub.cancel()
        reply.cancel()
        if dead:
            raise DeadKernelError(f"Kernel died while cell {index + 1} was judged")
        streams = [] if answer is _HUNG else [tuple(s) for s in answer["streams"]]
        cell.outputs = _streams(streams + bounded_streams(kernel_streams))
        if timed_out:
            cell.outputs.append(new_output("error", **self.error_on_timeout))
        elif answer["error"] is not None:
            cell.outputs.append(new_output("error", **answer["error"]))
        elif answer["value"] is not None:
            cell.outputs.append(new_output("execute_result", data={"text/plain": answer["value"]},
                                           execution_count=None))
        await run_hook(self.on_cell_complete, cell=cell, cell_index=index)
        errors = [o for o in cell.outputs if o.output_type == "error"]
        content = ({"status": "error", "ename": errors[0].ename, "evalue": errors[0].evalue,
                    "traceback": errors[0].traceback} if errors else {"status": "ok"})
        await run_hook(self.on_cell_executed, cell=cell, cell_index=index,
                       execute_reply={"content": content})
        return cell

    def _rank_isolation(self) -> dict[str, str]:
        """When this notebook's kernel is sandboxed, the checks' student ranks (assignment 7)
        are too, each alone (:mod:`grader.grading.sandbox.rank`)."""
        try:
            argv = list(self.km.kernel_spec.argv)
        except Exception:  # noqa: BLE001 - no kernel spec: a plain kernel
            return {}
        if "grader.grading.sandbox.kernel" in argv and "--settings" in argv:
            return rank.isolation(argv[argv.index("--settings") + 1])
        return {}

    async def _run_in_judge(self, reply, deadline: float, cmd: dict):
        """Have the judge process run ``cmd``: ``(answer, kernel died)``; the answer is
        ``_HUNG`` when the judge did not answer within the time limit (then it was killed,
        with what it started), or a judge-error answer when it ended without one."""
        judge = self._judge_process
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, judge.prepare)
            judge.send(cmd)
        except (OSError, RuntimeError, ValueError) as e:
            judge.kill()
            return _judge_failed(f"the judge could not start this cell ({e})"), False
        aborted = False
        while True:
            if await _readable(judge, 0.5):
                try:
                    return judge.receive(), False
                except (EOFError, OSError, ValueError) as e:
                    over = judge.hit_memory_limit()
                    judge.kill()
                    if over:
                        return _judge_failed(
                            "the judge's work for this cell went over the job's memory "
                            f"limit ({self.judge_memory_bytes / 2**30:g} GiB) and was "
                            "ended"), False
                    return _judge_failed(f"the judge process ended without an answer ({e!r})"), False
            if not await self._alive():
                judge.kill()
                return _HUNG, True
            if reply.done() and not aborted:   # the kernel is not serving (any more)
                try:
                    judge.send({"op": "abort"})
                except OSError:
                    pass
                aborted = True
            if time.monotonic() > deadline + GRACE_S:   # judge code that never returned
                judge.kill()
                return _HUNG, False

    async def _finished(self, reply, iopub) -> bool:
        """Wait for the kernel to leave ``serve`` and for its output; ``False`` if it died, or
        did not come back within ``GRACE_S`` (interrupted half way, then shut down: a kernel
        that ignores the interrupt is treated like one that died)."""
        start = time.monotonic()
        interrupted = False
        while not reply.done():
            if not await self._alive():
                return False
            waited = time.monotonic() - start
            if waited > GRACE_S / 2 and not interrupted:
                # still in ``serve``: waiting for a judge that answered without connecting
                # (it could not), or stuck in the student's code; an interrupt ends either
                await self._ensure_async(self.km.interrupt_kernel())
                interrupted = True
            if waited > GRACE_S:
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
        size = 0
        while True:
            msg = await self._ensure_async(self.kc.iopub_channel.get_msg(timeout=None))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            content = msg["content"]
            if msg["msg_type"] == "stream" and size <= MAX_STREAM_CHARS:
                when = msg["header"].get("date")
                stamp = when.timestamp() if hasattr(when, "timestamp") else time.time()
                text = str(content.get("text", ""))[:MAX_STREAM_CHARS + 1]
                size += len(text)
                sink.append((stamp, "stderr" if content.get("name") == "stderr" else "stdout", text))
            elif msg["msg_type"] == "status" and content.get("execution_state") == "idle":
                return

    async def _kernel_reply(self, msg_id: str) -> dict:
        while True:
            msg = await self._ensure_async(self.kc.shell_channel.get_msg(timeout=None))
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg


async def _readable(judge: JudgeProcess, timeout: float) -> bool:
    """Wait up to ``timeout`` s for the judge's answer, without blocking the event loop."""
    if judge.poll():
        return True
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    try:
        loop.add_reader(judge.fileno(), lambda: ready.done() or ready.set_result(True))
    except (NotImplementedError, RuntimeError):   # a loop without readers: poll
        await asyncio.sleep(min(timeout, 0.05))
        return judge.poll()
    try:
        await asyncio.wait_for(ready, timeout)
    except asyncio.TimeoutError:
        pass
    finally:
        loop.remove_reader(judge.fileno())
    return judge.poll()


def _judge_failed(reason: str) -> dict:
    return {"streams": [], "value": None, "timeout": False,
            "error": {"ename": "JudgeError", "evalue": reason, "traceback": [f"JudgeError: {reason}"]}}


_HUNG = object()   # the judge did not answer within the cell's time limit


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
