"""A cell that ends the kernel costs only that cell.

When a student's code ends the Python kernel (``os._exit``, a segmentation fault, a kill of
its own process), nbclient raises ``DeadKernelError`` and nbgrader drops the whole notebook.
The pipeline (:mod:`grader.grading.run.pipeline`) therefore autogrades with
:class:`GuardedExecute` in place of nbgrader's ``Execute``. It is the same preprocessor, in
the same place (after nbgrader has restored the released test cells) and under the same
limits, with two additions, both set on the nbgrader command line by the pipeline:

- ``trace_file``: before sending each cell to the kernel, *this* process (nbgrader's, not the
  kernel) writes the cell's index and name there. When the kernel dies, the last index written is
  the cell that was running. Nothing the student's code prints is read.
- ``skip_cells``: the indices of cells that ended the kernel in an earlier attempt. Their
  source is replaced by a ``raise RuntimeError(...)`` saying so, in the copy nbgrader
  executes (the submitted file is never changed). A test cell replaced this way fails and
  scores 0; a solution cell replaced this way leaves its names undefined, so the tests that
  need them fail and the independent ones still score.

:func:`autograde_config` and :func:`dead_cell` are the pipeline's side of it; the pipeline
retries a bounded number of times (:data:`MAX_ROUNDS`) and then records the whole-notebook
zero. A cell is named by its position (1-based) and, where it has one, its grade id.

It also bounds what the kernel leaves: a message from the kernel larger than
:func:`message_limit` is replaced by a short note before its JSON is parsed (parsing the
240 MB JSON header of one message grew a worker to 5 GB), one larger than
:func:`message_cap` is refused by ZeroMQ before it is read (``MAXMSGSIZE``; that connection
then stays closed, so the cells that follow are noted as missing output instead of failing
the notebook); the notebook's outputs are kept within ``output_bytes`` in all as they
arrive
(:mod:`grader.grading.sandbox.outputs`), and when the kernel has ended, every process of the
sandbox's uid (``sandbox_uid``) is gone and what the kernel made in its folder is removed
(:mod:`grader.grading.sandbox.workdir`) before nbgrader writes the graded notebook there.
"""
from __future__ import annotations

import os
from pathlib import Path

from nbclient.util import run_sync
from nbgrader.preprocessors import Execute
from traitlets import Bool, Float, Int, Unicode
from traitlets.config import Config

from ..config import Limits
from . import bounds, procs, workdir
from .outputs import CUT, Budget, BoundOutputs, note, size_of

__all__ = ["GuardedExecute", "KILLED", "MAX_ROUNDS", "autograde_config", "chain", "dead_cell",
           "dead_cause", "describe", "replacement"]

# Attempts in all: the first, then one more for each cell found ending the kernel
# (COURSE_CRASH_ROUNDS changes it for a grading run; the tests use it).
MAX_ROUNDS = int(os.environ.get("COURSE_CRASH_ROUNDS", "4"))



KILLED = "ended the Python kernel during grading"
_OUTPUTS = {"stream", "display_data", "execute_result", "error"}


def message_limit(output_bytes: int) -> int:
    """The largest message parsed from a kernel: four times a notebook's output budget and a
    MB (a larger print is still read, and cut to the budget; a larger one becomes a note)."""
    return 4 * output_bytes + 2**20


def message_cap(output_bytes: int) -> int:
    """The largest message received at all (ZeroMQ's ``MAXMSGSIZE``)."""
    return max(64 * 2**20, 4 * message_limit(output_bytes))


def bounded_deserialize(session, limit: int):
    """``session.deserialize`` that does not parse a message over ``limit`` bytes: an output
    becomes a ``stream`` note, a reply an error saying so (its small header and parent, when
    they are small, say which cell it belongs to)."""
    import datetime

    real = session.deserialize

    def deserialize(msg_list, content=True, copy=True):
        sizes = [memoryview(f).nbytes for f in msg_list]
        if sum(sizes) <= limit or len(msg_list) < 5:
            return real(msg_list, content=content, copy=copy)
        small = lambda i: session.unpack(bytes(memoryview(msg_list[i]))) if sizes[i] < 2**16 else {}  # noqa: E731
        try:
            header, parent = small(1), small(2)
        except ValueError:
            header, parent = {}, {}
        kind = header.get("msg_type") if isinstance(header, dict) else None
        text = (f"\n{CUT}: a message of {sum(sizes) / 2**20:.1f} MB from the kernel is over the "
                f"limit of {limit / 2**20:.1f} MB and was not read]\n")
        if kind in ("execute_reply", "inspect_reply", "complete_reply", "kernel_info_reply"):
            body = {"status": "error", "ename": "MessageTooLarge", "evalue": text.strip(),
                    "traceback": [text.strip()]}
        else:
            kind, body = "stream", {"name": "stdout", "text": text}
        head = {"msg_id": str(header.get("msg_id", "")) if isinstance(header, dict) else "",
                "msg_type": kind, "date": datetime.datetime.now(datetime.timezone.utc)}
        return {"header": head, "msg_id": head["msg_id"], "msg_type": kind,
                "parent_header": parent if isinstance(parent, dict) else {}, "metadata": {},
                "content": body, "buffers": []}

    return deserialize


LOST = (f"\n{CUT}: a message from the kernel larger than the limit was refused, so some "
        "output of this cell is missing]\n")


def replacement(label: str) -> str:
    """The source that runs instead of a cell that ended the kernel."""
    msg = f"{label} {KILLED} (os._exit, a crash or a kill); it was not run"
    return f"raise RuntimeError({msg!r})\n"


class GuardedExecute(Execute):
    """nbgrader's ``Execute``, recording the running cell and not running known killers."""

    trace_file = Unicode("", help="file that receives the index of the cell being run").tag(config=True)
    # Comma-separated: the class is not known to nbgrader's command-line parser, so a list
    # option would arrive as strings.
    skip_cells = Unicode("", help="indices of cells replaced by a raise, e.g. '3,6'").tag(config=True)

    output_bytes = Int(4 * 2**20, help="bytes of output a notebook keeps in all (and what "
                       "bounds the messages read from the kernel)").tag(config=True)
    sandbox_uid = Int(-1, help="the sandbox slot's uid: its processes are ended when the "
                      "kernel is (-1: no sandbox)").tag(config=True)
    folder_files = Int(0, help="entries the kernel may add to its folder; checked after each "
                       "cell (0: not checked)").tag(config=True)
    folder_bytes = Int(0, help="bytes the kernel may add to its folder").tag(config=True)
    # a refused message can take the cell's "idle" with it: the cell ends after
    # iopub_timeout with what arrived, noted, instead of failing the whole notebook
    raise_on_iopub_timeout = Bool(False).tag(config=True)
    starved_retry = Bool(False, help="a cell whose time limit runs out while the job's group "
                         "was kept from the CPU (bounds.starved) ends the attempt as the "
                         "machine's fault (bounds.STARVED), to be graded again; False: the "
                         "cell is stopped and scored, as any time limit").tag(config=True)
    fair_cores = Float(1.0, help="the job's fair share of the machine's cores (a core, or "
                       "the cores over the workers when fewer)").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        for i in (int(i) for i in self.skip_cells.split(",") if i.strip()):
            if 0 <= i < len(nb.cells) and nb.cells[i].cell_type == "code":
                nb.cells[i].source = replacement(describe(i, nb.cells[i].metadata))
        folder = (resources or {}).get("metadata", {}).get("path")
        before = workdir.snapshot(folder) if folder else None
        self._folder = folder
        self._usage0 = bounds.usage(folder, 10**6) if folder and self.folder_files else (0, 0)
        self._budget, self._noted, self._contexts = Budget(self.output_bytes), set(), []
        self._sent: set[int] = set()
        self._idle: set[int] = set()
        self._job = bounds.Box.of_job() if self.starved_retry else None
        self._cpu0 = None
        try:
            return super().preprocess(nb, resources, km)
        finally:
            if self.sandbox_uid > 0:
                procs.kill_uid(self.sandbox_uid)
            if before is not None:
                workdir.restore(folder, before)
            for ctx in self._contexts:
                ctx.destroy(linger=0)

    async def async_start_new_kernel_client(self):
        """nbclient's, with the client's messages bounded (:func:`message_limit`)."""
        import zmq
        import zmq.asyncio

        ctx = zmq.asyncio.Context()
        ctx.setsockopt(zmq.MAXMSGSIZE, message_cap(self.output_bytes))  # for its sockets
        self._contexts = [*getattr(self, "_contexts", []), ctx]
        make = self.km.client

        def client(**kw):
            kc = make(context=ctx, **kw)   # its session is a clone of the manager's
            kc.session.deserialize = bounded_deserialize(kc.session,
                                                         message_limit(self.output_bytes))
            return kc

        self.km.client = client
        try:
            return await super().async_start_new_kernel_client()
        finally:
            del self.km.client

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    async def async_execute_cell(self, cell, cell_index, execution_count=None,
                                 store_history=True):
        out = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        sent, idle = getattr(self, "_sent", set()), getattr(self, "_idle", set())
        if cell_index in sent and cell_index not in idle:
            from nbformat.v4 import new_output   # its "idle" never came: a message was lost
            cell.outputs.append(new_output("stream", name="stdout", text=LOST))
        if cell_index in sent and self.folder_files and getattr(self, "_folder", None):
            await self._check_folder(cell_index)
        return out

    async def _check_folder(self, cell_index: int) -> None:
        """End the kernel in this cell if it made its folder hold more than it may (the
        launcher's watch looks only twice a second, and would end it in a later cell)."""
        from nbclient.exceptions import DeadKernelError
        from nbclient.util import ensure_async

        n0, used0 = self._usage0
        n, used = bounds.usage(self._folder, n0 + self.folder_files)
        if n <= n0 + self.folder_files and used <= used0 + self.folder_bytes:
            return
        if self.trace_file:
            with open(self.trace_file, "a") as f:
                f.write(f"\t{bounds.FILES_LIMIT}")
        await ensure_async(self.km.shutdown_kernel(now=True))
        raise DeadKernelError(f"cell {cell_index + 1} wrote more into the kernel's folder than "
                              "it may; the kernel was stopped")

    execute_cell = run_sync(async_execute_cell)

    async def _async_handle_timeout(self, timeout, cell=None):
        """nbclient's (the cell is interrupted and scored), unless the job's group was kept
        from the CPU while the cell ran (:func:`~grader.grading.sandbox.bounds.starved`, on
        the kernel's accounting of the group, which the cell's processes cannot forge):
        then the kernel is stopped and the attempt ends as the machine's fault
        (:data:`~grader.grading.sandbox.bounds.STARVED` in the trace), graded again later."""
        job = getattr(self, "_job", None)
        if job is not None and bounds.starved(getattr(self, "_cpu0", None), job.cpu_sample(),
                                              self.fair_cores):
            from nbclient.exceptions import DeadKernelError
            from nbclient.util import ensure_async

            if self.trace_file:
                with open(self.trace_file, "a") as f:
                    f.write(f"\t{bounds.STARVED}")
            await ensure_async(self.km.shutdown_kernel(now=True))
            raise DeadKernelError(f"the cell's time limit ({timeout} s) ran out while other "
                                  "work held the CPU; the kernel was stopped")
        return await super()._async_handle_timeout(timeout, cell)

    def process_message(self, msg, cell, cell_index):
        """nbclient's, keeping the outputs within the notebook's budget."""
        kind, budget = msg["msg_type"], getattr(self, "_budget", None)
        if kind == "status" and msg["content"].get("execution_state") == "idle":
            getattr(self, "_idle", set()).add(cell_index)
        if budget is not None and kind in _OUTPUTS:
            content = budget.content(kind, msg["content"], cell_index)
            if content is not msg["content"]:
                self._note_cut(cell, cell_index)
                if content is None:
                    return None
                msg = {**msg, "content": content}
        elif budget is not None and (kind == "update_display_data" or kind.startswith("comm")):
            need = size_of(msg["content"])
            if need > budget.left:
                self._note_cut(cell, cell_index)
                return None
            budget.left -= need
        return super().process_message(msg, cell, cell_index)

    def _note_cut(self, cell, cell_index) -> None:
        if cell_index not in self._noted:
            self._noted.add(cell_index)
            from nbformat.v4 import new_output
            cell.outputs.append(new_output("stream", name="stdout", text=note(self.output_bytes)))

    def on_cell_execute(self, **kwargs):  # nbclient hook, before the cell is sent
        getattr(self, "_sent", set()).add(kwargs["cell_index"])
        if getattr(self, "_job", None) is not None:
            self._cpu0 = self._job.cpu_sample()
        if self.trace_file:
            i = kwargs["cell_index"]
            Path(self.trace_file).write_text(f"{i}\t{describe(i, kwargs['cell'].metadata)}")


def describe(index: int, metadata: dict) -> str:
    gid = metadata.get("nbgrader", {}).get("grade_id")
    return f"cell {index + 1}" + (f" (grade id {gid!r})" if gid else "")


def chain(executor: type) -> list[type]:
    """nbgrader's own list of autograde preprocessors with ``executor`` in place of
    ``Execute``, followed by :class:`~grader.grading.sandbox.outputs.BoundOutputs` (everything else
    as nbgrader has it)."""
    from nbgrader.converters import Autograde

    out = []
    for p in Autograde.class_traits()["autograde_preprocessors"].default():
        out += [executor, BoundOutputs] if p is Execute else [p]
    assert executor in out, "nbgrader's Autograde no longer runs Execute"
    return out


def autograde_config(limits: Limits, executor: type | None = None, trace_file: Path | None = None,
                     skip: list[tuple[int, str]] = (), starved_retry: bool = False,
                     fair_cores: float = 1.0) -> Config:
    """The nbgrader configuration that autogrades under ``limits`` (``course.toml``) with
    ``executor`` (:class:`GuardedExecute` or a subclass; the course's is
    :class:`~grader.grading.judge.executor.JudgedExecute`) in place of nbgrader's ``Execute``:
    the cell time limit (``Execute.timeout``), the output and kernel-folder limits, and, for
    one grading attempt, the crash trace file and ``skip``, the ``(index, label)`` of the cells
    not to run, and whether a cell starved of the CPU ends the attempt as the machine's
    fault (``starved_retry``, with the job's share ``fair_cores``: the grading worker's). The one place where these settings become nbgrader's: the worker merges it
    over the course's ``nbgrader_config.py``, which calls it too."""
    executor = executor or GuardedExecute
    c = Config()
    c.Autograde.autograde_preprocessors = chain(executor)
    c.Execute.timeout = limits.cell_timeout_s
    c.GuardedExecute.output_bytes = int(limits.output_mb * 2**20)
    c.GuardedExecute.folder_files = limits.kernel_files
    c.GuardedExecute.folder_bytes = int(limits.kernel_disk_mb * 2**20)
    c.BoundOutputs.output_bytes = int(limits.output_mb * 2**20)
    # the judge's work for this notebook (JudgedExecute) under the job's memory limit too
    c.JudgedExecute.judge_memory_bytes = int(limits.memory_gb * 2**30)
    if trace_file is not None:
        c.GuardedExecute.trace_file = str(trace_file)
    if skip:
        c.GuardedExecute.skip_cells = ",".join(str(i) for i, _ in skip)
    c.GuardedExecute.starved_retry = starved_retry
    c.GuardedExecute.fair_cores = float(fair_cores)
    return c


def dead_cell(trace_file: Path) -> tuple[int, str] | None:
    """``(index, label)`` of the cell that was running when the kernel died (``None``: no
    cell had started, or the trace is unreadable)."""
    try:
        index, label = trace_file.read_text().split("\t")[:2]
        return int(index), label.strip()
    except (OSError, ValueError):
        return None


def dead_cause(trace_file: Path) -> str | None:
    """Why this process ended the kernel in the cell of the trace (``"files-limit"``), or
    None when it did not."""
    try:
        parts = trace_file.read_text().split("\t")
    except OSError:
        return None
    return parts[2].strip() if len(parts) > 2 else None
