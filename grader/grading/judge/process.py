"""The judge of one notebook, in a process of its own that the grading process can kill.

:class:`grader.grading.judge.executor.JudgedExecute` (in nbgrader's process: the grading worker) runs
test cells outside the student's kernel, but not in its own process: what the kernel sends
is decoded within limits (:mod:`grader.wire`), yet a check's comparison or a payload no limit
foresaw could hold the GIL of the process that handles it, and with it the worker's lease
heartbeat, its progress and every other student it would grade next. So each notebook gets a
*judge process* (:class:`JudgeProcess`). It runs the instructor's locked cells (the imports)
and every test cell in its main thread, fetches the student's names over the channel
(:mod:`grader.grading.judge.channel`), and answers with the cell's outputs as bounded JSON: streams
(bounded, :mod:`grader.grading.judge.cells`), the last value's ``repr`` and the error, if any.

The worker waits for that answer without ever running the judge's code or decoding the
kernel's data itself. A cell whose answer has not come within its time limit plus
``GRACE_S`` gets its process killed, with everything it started (an a7 check's ranks), and a
fresh process, with the locked cells run again, judges the next cell.

Processes come from a fork server (``multiprocessing``'s ``forkserver``) that has imported the
checks and NumPy once (:data:`PRELOAD`): a judge process costs a fork, not the second of
importing them. It dies with its server. It starts as the worker's user (root under ``make
grade``) and runs the instructor's locked cells so; before its first test cell it gives that
up for good (:mod:`grader.grading.judge.confine`: an unprivileged uid, limits, a clean path, a
folder of its own); from its start it runs in a control group with the job's memory limit.
"""
from __future__ import annotations

import builtins
import ctypes
import importlib.util
import io
import json
import multiprocessing
import os
import pkgutil
import secrets
import signal
import sys
import threading
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.context import ForkServerProcess, set_spawning_popen
from typing import Any

from ...lab.core.threads import framework_ready
from .cells import CellNamespace, bounded_streams, error_fields, run_cell_source, run_test_cell
from . import confine, meter
from .channel import JOB_BUDGET, RemoteTimeout, connect

__all__ = ["JudgeProcess", "PRELOAD", "MAX_REPR_CHARS", "warm"]

MAX_REPR_CHARS = 100_000
MAX_REPLY_BYTES = 16 * 2**20
# imported once by the fork server (and every check module); PyTorch and Paddle too if this
# process has them already (they take seconds; a check that needs one imports it itself)
PRELOAD = ("numpy", "grader.grading.judge.process", "grader.checks.support")


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _child_main(conn) -> None:
    """The judge process: runs the commands of :class:`JudgeProcess` until told to stop."""
    _die_with_parent()
    if os.geteuid() == 0:     # while this process has one thread (confine.open_views)
        try:
            confine.open_views()
        except OSError as e:
            print(f"the judge's view of Python could not be made: {e}", file=sys.stderr)
    hello = json.loads(conn.recv_bytes())
    os.environ.clear()
    os.environ.update(hello["env"])
    os.chdir(hello["cwd"])
    sys.path[:] = hello["path"]
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    if hello.get("course_root"):     # where a test cell's hidden block finds the checks
        from .. import hidden

        hidden.use(hello["course_root"])
    _STATE["hello"] = hello
    base: dict = {"__name__": "__judge__", "__builtins__": builtins}
    while True:
        try:
            cmd = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        framework_ready()              # (Paddle's mode is per thread: grader.lab.core.threads)
        if cmd["op"] == "locked":      # no answer: a failure shows in the test cells
            run_cell_source(cmd["source"], base, cmd["filename"])
            continue
        if cmd["op"] == "test":
            reply = _judge_cell(cmd, base, conn)
        elif cmd["op"] == "stop":
            return
        else:          # "abort" that came after the cell it was meant for: nothing to do
            continue
        conn.send_bytes(json.dumps(reply).encode())


_STATE: dict = {}      # the judge process's: its hello, and what confine.drop left it


def _confine(cmd: dict):
    """Before the first test cell: give up the grading user's rights for good
    (:mod:`grader.grading.judge.confine`)."""
    confined = _STATE.get("confined")
    if confined is None:
        hello = _STATE.get("hello", {})
        isolation = cmd.get("env", {}).get(confine.RANK_ENV)
        # while still root: the kernel's memory group, for checks that measure a call's
        # memory (grader.grading.judge.meter)
        meter.open_kernel_group()
        confined = _STATE["confined"] = confine.drop(
            settings_file=confine.settings_of(isolation) if isolation else None,
            course_root=hello.get("course_root"), folder=cmd["folder"], tmp=hello.get("tmp"),
            rank_isolation=isolation)
        _STATE["folder"] = cmd["folder"]
    env = dict(cmd.get("env", {}))
    if confined.dropped:     # ranks start through the gate drop made (or, without one, plainly),
        env.pop(confine.RANK_ENV, None)          # their folders in the judge's own folder
        env.pop("COURSE_JOB_TMP", None)
    os.environ.update(env)
    return confined


def _judge_cell(cmd: dict, base: dict, conn) -> dict:
    deadline = float(cmd["deadline"])          # CLOCK_MONOTONIC: the same in every process
    streams, value, error = [], None, None
    try:
        confined = _confine(cmd)
        folder = confined.folder_fd if _STATE.get("folder") == cmd["folder"] else cmd["folder"]
        # the worker writes "abort" when the kernel finished the bootstrap without serving
        channel = connect(folder, cmd["socket"], deadline, alive=lambda: not conn.poll(),
                          budget=JOB_BUDGET)
        channel.deadline = deadline
        streams, value, error = run_test_cell(cmd["source"], CellNamespace(base, channel),
                                              cmd["filename"])
        channel.stop()
    except BaseException as e:  # noqa: BLE001 - reported as the cell's outcome
        error = e
    text = None
    if value is not None and error is None:
        try:
            text = repr(value)[:MAX_REPR_CHARS]
        except Exception as e:  # noqa: BLE001 - a repr that fails is the cell's error
            error = e
    return {"streams": bounded_streams(streams), "value": text,
            "error": error_fields(error) if error is not None else None,
            "timeout": isinstance(error, RemoteTimeout)}


class _Popen(popen_forkserver.Popen):
    """``popen_forkserver.Popen`` whose child does not import the grading process's
    ``__main__`` again (``multiprocessing`` would: the worker's module, or a script, for
    every judge process)."""

    def _launch(self, process_obj):   # popen_forkserver.Popen._launch, less __main__
        prep = spawn.get_preparation_data(process_obj._name)
        prep.pop("init_main_from_path", None)
        prep.pop("init_main_from_name", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(ForkServerProcess):
    _Popen = staticmethod(_Popen)


_CONTEXT: Any = None
_SWEPT = False       # the groups of judges whose grading process was killed: swept once


def _context():
    """The fork server's context, its preload list set once (the server starts with the
    first judge process and serves this grading process from then on)."""
    global _CONTEXT
    if _CONTEXT is None:
        import grader.checks

        ctx = multiprocessing.get_context("forkserver")
        mods = [m for m in PRELOAD if importlib.util.find_spec(m.split(".")[0]) is not None]
        mods += [fw for fw in ("torch", "paddle") if fw in sys.modules]
        mods += [f"grader.checks.{m.name}" for m in pkgutil.iter_modules(grader.checks.__path__)]
        ctx.set_forkserver_preload(mods)
        _CONTEXT = ctx
    return _CONTEXT


def warm() -> None:
    """Start the fork server now: its imports then overlap what the caller does next (a
    grading worker, while the course is set up) instead of its first notebook."""
    _context()
    forkserver.ensure_running()


class JudgeProcess:
    """The worker's handle on one notebook's judge process. It starts in the background at
    once; :meth:`kill` ends it, and the next :meth:`prepare` starts a fresh one and sends it
    the locked cells again. Only :meth:`prepare` may block (on a start): call it off the
    event loop."""

    def __init__(self, course_root: str | None = None, kernel_folder: str | None = None,
                 memory_bytes: int = 0, processes: int = 0) -> None:
        """``memory_bytes`` (with ``processes``): each judge process, and what it starts,
        runs in a control group of its own with these limits, the job's (0: none; so too
        where this machine allows no control group: its rlimits alone then apply)."""
        away = [os.getcwd(), course_root or "", kernel_folder or ""]
        self._limits = (int(memory_bytes), int(processes))
        self._box: Any = None
        self._hello = {"env": confine.clean_env(dict(os.environ)), "cwd": "/",
                       "path": confine.clean_path(list(sys.path), away, (0, os.geteuid())),
                       "course_root": course_root, "tmp": None}
        self._locked: list[tuple[str, str]] = []
        self._sent = 0                     # locked cells the current process was sent
        self._proc: Any = None
        self._conn: Any = None
        self._pidfd: int | None = None
        self._failure: BaseException | None = None
        self._starting: threading.Thread | None = None
        self._begin()

    def _begin(self) -> None:
        self._sent, self._failure = 0, None
        # each judge process's own folder, made by it as root, removed by kill()
        self._hello["tmp"] = os.path.join(confine.temp_base(), f"course-judge-{secrets.token_hex(8)}")
        self._starting = threading.Thread(target=self._start, name="judge-start", daemon=True)
        self._starting.start()

    def _start(self) -> None:
        try:
            parent, child = _context().Pipe(duplex=True)
            proc = _Process(target=_child_main, args=(child,), daemon=True, name="grading-judge")
            proc.start()
            child.close()
            # a pidfd names this process even after its pid is reused (it is the server's
            # child, not ours: we cannot reap it)
            self._pidfd = os.pidfd_open(proc.pid)
            self._box = self._boxed(proc.pid)
            # the child waits for this before it runs anything: it is in its group by then
            parent.send_bytes(json.dumps(self._hello).encode())
            self._proc, self._conn = proc, parent
        except BaseException as e:  # noqa: BLE001 - raised by the next prepare()
            self._failure = e

    def _boxed(self, pid: int):
        """The control group of judge process ``pid`` (``None``: no limits asked for, or
        none allowed here). Named ``course-judge-<pid>-<this pid>`` so that a grading
        process killed before it removed its groups has them swept by the next."""
        from ..sandbox import bounds

        global _SWEPT
        memory, processes = self._limits
        if memory <= 0:
            return None
        if not _SWEPT:                     # once per grading process, not per judge
            bounds.sweep("course-judge-")
            _SWEPT = True
        box = bounds.Box.create(f"course-judge-{pid}-{os.getpid()}", memory,
                                processes or confine.JUDGE_PROCESSES)
        if box is not None:
            box.add(pid)
        return box

    def hit_memory_limit(self) -> bool:
        """Whether the judge's work ended because its group reached the job's memory limit
        (ask before :meth:`kill`, which removes the group)."""
        return self._box is not None and self._box.hit_memory_limit()

    def _started(self) -> bool:
        return self._starting is not None and not self._starting.is_alive()

    def _flush(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"the judge process did not start: {self._failure}")
        for source, filename in self._locked[self._sent:]:
            self._conn.send_bytes(json.dumps({"op": "locked", "source": source,
                                              "filename": filename}).encode())
        self._sent = len(self._locked)

    def locked(self, source: str, filename: str) -> None:
        """Run an instructor's locked cell in the judge too (no answer is awaited: a failure
        shows in the test cells that need its names)."""
        self._locked.append((source, filename))
        if self._started() and self._conn is not None:
            self._flush()

    def prepare(self) -> None:
        """A running process that has every locked cell (blocks while it starts)."""
        if self._starting is None:
            self._begin()
        self._starting.join()
        self._flush()

    def send(self, cmd: dict) -> None:
        """A command for the prepared process (``OSError`` if it is gone)."""
        self._conn.send_bytes(json.dumps(cmd).encode())

    def fileno(self) -> int:
        return self._conn.fileno()

    def poll(self) -> bool:
        return self._conn.poll(0)

    def receive(self) -> dict:
        """The answer to the last command; ``EOFError``/``OSError`` if the process died."""
        return json.loads(self._conn.recv_bytes(MAX_REPLY_BYTES))

    def kill(self) -> None:
        """Kill the process and everything it started (an a7 check's ranks)."""
        from ..sandbox import procs

        if self._starting is not None:
            self._starting.join()
        proc, pidfd = self._proc, self._pidfd
        if proc is not None and pidfd is not None:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGSTOP)   # no new children meanwhile
                procs.kill_descendants(proc.pid)
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass                                             # it had ended already
            proc.join(5)
        if pidfd is not None:
            os.close(pidfd)
        if self._conn is not None:
            self._conn.close()
        if self._box is not None:
            self._box.remove()
            self._box = None
        if self._hello.get("tmp"):
            import shutil

            shutil.rmtree(self._hello["tmp"], ignore_errors=True)
        self._proc = self._conn = self._starting = self._pidfd = None

    def close(self) -> None:
        """Tell the process to stop, then make sure (the notebook is done)."""
        if self._starting is not None:
            self._starting.join()
        if self._proc is not None and self._conn is not None:
            try:
                self.send({"op": "stop"})
                self._proc.join(1.0)
            except (OSError, ValueError):
                pass
        self.kill()
