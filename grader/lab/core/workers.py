"""CPU worker processes that stand in for devices when a machine has too few GPUs.

A worker behaves like a GPU queue: :meth:`Worker.submit` returns at once with a
:class:`Future`, the work runs in another process (so it really runs in parallel, which
threads would not: the GIL and one shared BLAS pool get in the way), and
:meth:`Worker.synchronize` waits for everything submitted so far. Data lives in the
worker's own memory; :meth:`Worker.put` copies a value in and hands back a :class:`Ref`
(a "device pointer"), :meth:`Worker.get` copies it back out. A :class:`Future` of a kept
result may be passed to a later task on the same worker, like a tensor a kernel wrote.

Functions travel by name (pickle) when they live in a module, and by value when they are
defined in ``__main__`` (a notebook cell): see :func:`grader.lab.core.procs.portable`. A task
that raises comes back as :class:`WorkerError`, whose first line names the exception.
"""
from __future__ import annotations

import fcntl
import itertools
import os
import pickle
import re
import secrets
import stat
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Client, Listener
from dataclasses import dataclass
from typing import Any, Callable

from grader.wire import value_type
from .procs import RemoteFailure, callable_of, child_env, exit_now, log_tail, portable, \
    start_python

# Each worker is a fresh interpreter (grader.lab.core.procs). Parent and worker talk over an
# authenticated Unix socket with multiprocessing's Connection (pickle framing).


class WorkerError(RuntimeError):
    """The submitted function raised inside the worker.

    The message's first line names the task and the exception (``type_name: message``);
    the worker's traceback follows. The parts are attributes too."""

    def __init__(self, task_id: int, label: str, worker: int, failure: RemoteFailure) -> None:
        super().__init__(f"task {task_id} ({label}) on worker {worker} raised "
                         f"{failure.headline()}\n\nworker traceback:\n{failure.traceback}")
        self.task_id, self.label, self.worker = task_id, label, worker
        self.type_name, self.message = failure.type_name, failure.message
        self.remote_traceback = failure.traceback


class WorkerDied(RuntimeError):
    """The worker process ended (killed, crashed, os._exit) while work was pending."""


@dataclass(frozen=True)
class Ref:
    """A handle to a value that lives in a worker's memory, like a device pointer."""

    worker: int
    key: int


@value_type
@dataclass
class TaskRecord:
    """One finished task as the worker clocked it (``time.perf_counter_ns``, shared by all
    processes on the machine since it reads CLOCK_MONOTONIC)."""

    label: str
    kind: str
    start_ns: int
    end_ns: int


def _resolve(value: Any, store: dict[int, Any]) -> Any:
    if isinstance(value, Ref):
        if value.key not in store:
            raise LookupError(f"task {value.key}'s value is not in this worker: that task "
                              "failed, or its value was freed")
        return store[value.key]
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(v, store) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(v, store) for k, v in value.items()}
    return value


def _serve(address: str, index: int, threads: int) -> None:
    """Entry point of a worker process (see :class:`Worker`)."""
    try:   # held while this process lives: a folder whose logs nobody holds is stale
        fcntl.flock(1, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass
    conn = Client(address, authkey=bytes.fromhex(sys.stdin.readline().strip()))
    store: dict[int, Any] = {}
    threads_set: set[str] = set()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone (a kernel that ended): so is its log
            _remove_log(os.path.dirname(address), index)
            exit_now()
        op, task_id = msg[0], msg[1]
        start = time.perf_counter_ns()
        try:
            if op == "stop":
                conn.send(("ok", task_id, None, start, time.perf_counter_ns()))
                exit_now()
            if op == "put":
                store[task_id] = msg[2]
                result: Any = Ref(index, task_id)
            elif op == "get":
                result = store[msg[2].key]
            elif op == "free":
                store.pop(msg[2].key, None)
                result = None
            elif op == "call":
                fn, args, kwargs, keep = callable_of(msg[2]), msg[3], msg[4], msg[5]
                _limit_threads(threads, threads_set)
                value = fn(*_resolve(args, store), **_resolve(kwargs, store))
                if keep:
                    store[task_id] = value
                    result = Ref(index, task_id)
                else:
                    result = value
            else:
                raise ValueError(f"unknown worker op {op!r}")
            conn.send(("ok", task_id, result, start, time.perf_counter_ns()))
        except BaseException as exc:  # report everything, including KeyboardInterrupt in fn
            failure = RemoteFailure.from_exception(exc).as_data()
            conn.send(("err", task_id, failure, start, time.perf_counter_ns()))


def _log_path(log_dir: str, index: int) -> str:
    return os.path.join(log_dir, f"worker{index}.log")


def _remove_log(log_dir: str, index: int) -> None:
    """Worker ``index``'s log, and the folder once no other worker logs there."""
    try:
        os.unlink(_log_path(log_dir, index))
    except OSError:
        pass
    try:
        os.rmdir(log_dir)
    except OSError:
        pass


LOG_DIR_PREFIX = "course-workers-"
_LEFT = re.compile(r"worker\d+\.(log|sock)")


def sweep_stale_logs(root: str | None = None, min_age_s: float = 120.0) -> int:
    """Remove the ``course-workers-*`` folders in ``root`` (the temp folder) that no living
    worker logs into: folders whose worker was killed with its kernel (a kernel stopped
    with SIGKILL takes its workers along, and nobody removes their folder). A folder is
    stale when it is this user's, older than ``min_age_s`` (a worker that is starting has
    not locked its log yet), holds only worker logs and sockets, and every log can be
    locked (a living worker holds a lock on its own). Never follows a link. Returns how
    many folders went."""
    root = root or tempfile.gettempdir()
    gone = 0
    try:
        names = [n for n in os.listdir(root) if n.startswith(LOG_DIR_PREFIX)]
    except OSError:
        return 0
    for name in names:
        folder = os.path.join(root, name)
        try:
            st = os.lstat(folder)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() \
                    or time.time() - st.st_mtime < min_age_s:
                continue
            entries = os.listdir(folder)
            if not all(_LEFT.fullmatch(e) for e in entries):
                continue
            if not all(_unheld(os.path.join(folder, e)) for e in entries if e.endswith(".log")):
                continue
            for e in entries:
                os.unlink(os.path.join(folder, e))
            os.rmdir(folder)
            gone += 1
        except OSError:
            continue
    return gone


def _unheld(log: str) -> bool:
    """Whether no process holds the lock a living worker keeps on its log (a link: held)."""
    try:
        fd = os.open(log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _limit_threads(threads: int, done: set[str]) -> None:
    """Cap the intra-op threads of each framework the task has imported, once each."""
    for name in ("torch", "paddle"):
        if name in sys.modules and name not in done:
            from .backends import get_backend

            get_backend(name).set_num_threads(threads)
            done.add(name)


class Future:
    """The eventual result of a submitted task."""

    def __init__(self, worker: "Worker", task_id: int, label: str, keep: bool = False) -> None:
        self._worker, self.task_id, self.label, self.keep = worker, task_id, label, keep

    def done(self) -> bool:
        return self._worker._poll_done(self.task_id)

    def result(self, timeout: float | None = None) -> Any:
        return self._worker._wait(self.task_id, timeout)


class Worker:
    """One CPU worker process standing in for one device."""

    def __init__(self, index: int, threads: int = 1, log_dir: str | None = None,
                 start_timeout: float = 60.0) -> None:
        self.index, self.threads = index, threads
        log_dir = log_dir or tempfile.mkdtemp(prefix=LOG_DIR_PREFIX)
        self.log_path = _log_path(log_dir, index)
        address = os.path.join(log_dir, f"worker{index}.sock")
        authkey = secrets.token_bytes(16)
        listener = Listener(address, family="AF_UNIX", authkey=authkey)
        # framework chatter goes to the log, not the notebook
        self._proc = start_python(
            f"from grader.lab.core.workers import _serve; _serve({address!r}, {index}, {threads})",
            self.log_path, child_env(threads), stdin=subprocess.PIPE)
        self._proc.stdin.write((authkey.hex() + "\n").encode())
        self._proc.stdin.close()
        listener._listener._socket.settimeout(start_timeout)
        try:
            self._parent = listener.accept()
        except OSError as exc:
            self._proc.kill()
            raise WorkerDied(f"worker {index} did not start: {exc}\n{self.log_tail()}") from exc
        finally:
            listener.close()
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, str]] = {}
        self._results: dict[int, tuple[str, Any]] = {}
        self._labels: dict[int, str] = {}
        self.records: list[TaskRecord] = []

    # -- submitting -------------------------------------------------------------
    def _send(self, msg: tuple) -> int:
        self._check_alive()
        try:
            self._parent.send(msg)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise WorkerDied(f"worker {self.index} is gone ({exc}).\n{self.log_tail()}") from exc
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise TypeError(
                f"cannot send {msg[2]!r} to worker {self.index}: {exc}. A function run on a "
                "worker must be importable (defined in a module) or defined at the top level "
                "of a notebook cell or script, and what it reads must be picklable."
            ) from exc
        return msg[1]

    def put(self, value: Any, label: str = "put") -> Ref:
        """Copy ``value`` into the worker's memory; returns its :class:`Ref` once it is there."""
        task_id = next(self._ids)
        self._pending[task_id] = (label, "copy")
        self._send(("put", task_id, value))
        return self._wait(task_id, None)

    def submit(self, fn: Callable, *args: Any, keep: bool = False, label: str | None = None,
               kind: str = "compute", **kwargs: Any) -> Future:
        """Queue ``fn(*args, **kwargs)`` on the worker and return at once.

        :class:`Ref` arguments are replaced by the values they name inside the worker.
        With ``keep=True`` the result stays in the worker and the future yields a Ref.
        """
        task_id = next(self._ids)
        label = label or getattr(fn, "__name__", "task")
        args, kwargs = self._refs(args), self._refs(kwargs)
        self._pending[task_id] = (label, kind)
        self._send(("call", task_id, portable(fn), args, kwargs, keep))
        return Future(self, task_id, label, keep)

    def _refs(self, value: Any) -> Any:
        """Futures among a task's arguments: a kept result of this worker becomes its
        :class:`Ref` (the worker runs tasks in order, so it is there when needed); any
        other future is waited for and its value sent."""
        if isinstance(value, Future):
            if value._worker is not self:
                raise ValueError(
                    f"a future of task {value.task_id} on worker {value._worker.index} was "
                    f"passed to worker {self.index}: values do not move between workers by "
                    "themselves; copy it over first (put(get(...)))")
            return Ref(self.index, value.task_id) if value.keep else value.result()
        if isinstance(value, (list, tuple)):
            return type(value)(self._refs(v) for v in value)
        if isinstance(value, dict):
            return {k: self._refs(v) for k, v in value.items()}
        return value

    def get(self, ref: Ref, label: str = "get") -> Any:
        """Copy the value behind ``ref`` back to the caller (waits for queued work first)."""
        if ref.worker != self.index:
            raise ValueError(f"{ref} lives on worker {ref.worker}, not on worker {self.index}")
        task_id = next(self._ids)
        self._pending[task_id] = (label, "copy")
        self._send(("get", task_id, ref))
        return self._wait(task_id, None)

    def free(self, ref: Ref) -> None:
        task_id = next(self._ids)
        self._pending[task_id] = ("free", "other")
        self._send(("free", task_id, ref))

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait until everything submitted to this worker has finished."""
        for task_id in list(self._pending):
            self._wait(task_id, timeout, raise_errors=False)
        errors = [(tid, v) for tid, (st, v) in self._results.items() if st == "err"]
        if errors:
            tid, failure = errors[0]
            self._results.pop(tid)
            raise self._error(tid, failure)

    def _error(self, task_id: int, failure: Any) -> WorkerError:
        return WorkerError(task_id, self._labels.pop(task_id, "task"), self.index,
                           RemoteFailure.from_data(failure))

    # -- receiving --------------------------------------------------------------
    def log_tail(self, lines: int = 15) -> str:
        tail = log_tail(self.log_path, lines)
        return f"last lines of {self.log_path}:\n{tail}" if tail else ""

    def _check_alive(self) -> None:
        if not self.alive:
            raise WorkerDied(
                f"worker {self.index} has ended (exit code {self._proc.returncode}); "
                f"start new devices with get_devices(..., fresh=True).\n{self.log_tail()}"
            )

    def _receive_one(self, timeout: float | None) -> bool:
        if not self._parent.poll(timeout):
            return False
        try:
            status, task_id, value, t0, t1 = self._parent.recv()
        except (EOFError, ConnectionResetError):
            try:
                self._proc.wait(2)
            except subprocess.TimeoutExpired:
                pass
            raise WorkerDied(
                f"worker {self.index} died (exit code {self._proc.returncode}) with "
                f"{len(self._pending)} task(s) pending: {[l for l, _ in self._pending.values()]}"
                f"\n{self.log_tail()}"
            ) from None
        label, kind = self._pending.pop(task_id, ("?", "other"))
        if status == "err":
            self._labels[task_id] = label  # for the error's first line
        if kind in ("compute", "copy", "comm"):
            self.records.append(TaskRecord(label, kind, t0, t1))
        self._results[task_id] = (status, value)
        return True

    def _poll_done(self, task_id: int) -> bool:
        while task_id not in self._results and self._receive_one(0):
            pass
        return task_id in self._results

    def _wait(self, task_id: int, timeout: float | None, raise_errors: bool = True) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while task_id not in self._results:
            if task_id not in self._pending:
                return None  # already collected by a previous wait
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            # Poll in short slices so a dead worker is noticed, not waited on forever.
            if not self._receive_one(0.2 if left is None else min(0.2, left)):
                if not self.alive and not self._parent.poll(0):
                    self._receive_one(0)  # raises WorkerDied via EOF
                    self._check_alive()
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"worker {self.index}: task {task_id} not done after {timeout}s")
        if not raise_errors:
            return None
        status, value = self._results.pop(task_id)
        if status == "err":
            raise self._error(task_id, value)
        return value

    def close(self) -> None:
        if self.alive:
            try:
                self._parent.send(("stop", 0))
                self._proc.wait(2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.alive:
            self._proc.kill()
            self._proc.wait(2)
        self._parent.close()
        # its log goes with it (what it said that mattered was raised with a WorkerDied);
        # the folder goes with the last worker that logged into it
        _remove_log(os.path.dirname(self.log_path), self.index)

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None
