"""Grading workers forked from one process that has loaded them: ``python -m grader.grading.run.spawn``.

A grading worker (:mod:`.worker`) spends about 2 s of CPU before its first job: importing
nbgrader, nbconvert, Jinja, SQLAlchemy and the judge's modules, and compiling its feedback
page's templates. On a 2-core machine with two workers per core that was a tenth of a
30-student class's grading. This process does it once, while the pipeline sets the course
up, then forks each worker the pipeline asks for: a worker starts with everything a fresh
``python -m grader.grading.run.worker`` would have loaded, and runs the same ``main``.

It is as trusted as the pipeline that starts it (root, the course's owner) and no more: it
never reads a submission, holds no gradebook connection and runs no thread, so each child
starts from the state a fresh worker reaches after its imports; every job still gets its own
kernel, judge process and sandbox (:mod:`.item`).

The pipeline talks to it over a Unix socket of datagrams (one JSON message each):

- ``{"argv": [...]}`` with two descriptors (the worker's log, for its stdout and stderr, and
  the write end of its events pipe): a worker with these options (``--events`` is added);
  the answer is ``{"pid": P}`` with a pidfd of the worker, or ``{"error": "..."}``;
- when a worker ends: ``{"exit": P, "code": C}`` (as ``Popen.returncode``: ``-N`` for signal N).

The socket's end of file (the pipeline is gone or done) ends it; workers already started
go on. Where it cannot start or dies, :class:`Spawner` says so and the pipeline starts its
workers as their own processes instead (:class:`Forked` and ``subprocess.Popen`` answer the
same calls).
"""
from __future__ import annotations

import array
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

MAX_MESSAGE = 1 << 16
ANSWER_S = 120.0   # the longest the pipeline waits for a worker's pid (the spawner loads first)


def _send(sock: socket.socket, msg: dict, fds: list[int] = ()) -> None:
    data = json.dumps(msg).encode()
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], anc)


def _recv(sock: socket.socket, nfds: int) -> tuple[dict | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) at end of file."""
    size = socket.CMSG_SPACE(nfds * array.array("i").itemsize) if nfds else 0
    data, anc, flags, _ = sock.recvmsg(MAX_MESSAGE, size)
    fds: list[int] = []
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(payload[:len(payload) - len(payload) % a.itemsize])
            fds += list(a)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            os.close(fd)
        return {"error": "message too long"}, []
    return json.loads(data), fds


# ---------------------------------------------------------------- the pipeline's side


class Forked:
    """A worker the spawner forked, as the pipeline uses a ``subprocess.Popen``: ``pid``,
    ``returncode``, ``poll()`` and ``wait(timeout)``. That it ended is read from its pidfd;
    how (the exit status) from the spawner, which is its parent."""

    def __init__(self, spawner: "Spawner", argv: list[str]) -> None:
        self._spawner = spawner
        self.args = argv
        self._pid: int | None = None
        self._pidfd: int | None = None
        self.failed: str | None = None      # the spawner could not start it
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        self._spawner._resolve(self)
        return self._pid if self._pid is not None else -1

    def _ended(self, timeout: float | None) -> bool:
        self._spawner._resolve(self)
        if self._pidfd is None:
            return True
        return bool(select.select([self._pidfd], [], [], timeout)[0])

    def poll(self) -> int | None:
        if self.returncode is None and self._ended(0):
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._ended(timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._collect()
        return self.returncode

    def _collect(self) -> None:
        if self._pidfd is None:     # never started: as a worker that could not start
            self.returncode = 1
            return
        code = self._spawner._exit_code(self._pid, 10.0)
        # -1: the spawner died before it could say (the worker was reparented)
        self.returncode = code if code is not None else -1
        os.close(self._pidfd)
        self._pidfd = None


class Spawner:
    """The pipeline's handle on the spawner process, which it starts: :meth:`worker` asks
    for a worker (answered lazily, so that the pipeline's set-up does not wait for the
    spawner's imports), :meth:`close` at the end."""

    def __init__(self, course: Path, log: Path) -> None:
        self.course = course
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grader.grading.run.spawn", "--course", str(course),
                 "--control", str(theirs.fileno())],
                cwd=course, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()
        self.sock = ours
        self.dead: str | None = None
        self._pending: list[Forked] = []     # asked for, answer not read yet (in order)
        self._exits: dict[int, int] = {}

    def worker(self, argv: list[str], log_fd: int, events_fd: int) -> Forked | None:
        """A worker with ``argv`` (the worker's options, without ``--events``) whose output
        goes to ``log_fd`` and events to ``events_fd`` (both are sent, the caller closes its
        own); None if the spawner is gone (start the worker as a process of its own)."""
        if self.dead:
            return None
        try:
            _send(self.sock, {"argv": argv}, [log_fd, events_fd])
        except OSError as e:
            self.dead = f"the spawner is gone ({e})"
            return None
        f = Forked(self, argv)
        self._pending.append(f)
        return f

    def _pump(self, timeout: float | None) -> bool:
        """Read one message (an answer or an exit); False on timeout or end of file."""
        if self.dead:
            return False
        if not select.select([self.sock], [], [], timeout)[0]:
            return False
        try:
            msg, fds = _recv(self.sock, 1)
        except OSError:
            msg, fds = None, []
        if msg is None:
            self.dead = "the spawner ended"
            for f in self._pending:
                f.failed = self.dead
            self._pending.clear()
            return False
        if "exit" in msg:
            self._exits[int(msg["exit"])] = int(msg["code"])
            for fd in fds:
                os.close(fd)
            return True
        f = self._pending.pop(0)
        if "pid" in msg and fds:
            f._pid, f._pidfd = int(msg["pid"]), fds[0]
            for fd in fds[1:]:
                os.close(fd)
        else:
            f.failed = str(msg.get("error", "no pid"))
            for fd in fds:
                os.close(fd)
        return True

    def _resolve(self, f: Forked) -> None:
        end = time.monotonic() + ANSWER_S
        while f in self._pending:
            left = end - time.monotonic()
            if left <= 0 or not self._pump(left):
                break
        if f in self._pending:      # the spawner ended (or never answered)
            self._pending.remove(f)
            f.failed = self.dead or f"the spawner did not answer within {ANSWER_S:g} s"

    def _exit_code(self, pid: int, timeout: float) -> int | None:
        end = time.monotonic() + timeout
        while pid not in self._exits:
            left = end - time.monotonic()
            if left <= 0 or not self._pump(left):
                break
        return self._exits.pop(pid, None)

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- the spawner itself


def warm(course: Path) -> None:
    """Load, in this process, what every worker loads before and during its first job."""
    sys.modules.setdefault("rfc3987_syntax", None)   # type: ignore[arg-type] - see worker.py
    from . import item, worker  # noqa: F401
    from ..config import load
    from ..judge import executor, process  # noqa: F401
    from ..sandbox import crashes, setup  # noqa: F401
    import nbclient  # noqa: F401
    import nbgrader.converters.autograde  # noqa: F401
    import nbgrader.preprocessors  # noqa: F401

    import nbgrader.api  # noqa: F401 - the gradebook's models, for configure_mappers
    from sqlalchemy.orm import configure_mappers

    configure_mappers()         # the gradebook's ORM set up (else at each worker's first query)
    process._context()          # imports grader.checks; the fork server starts in each worker
    worker.share_gradebook_engines()
    item.feedback_writer(load(course).course)


class _Child(Exception):
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv


def serve(control: socket.socket, course: Path) -> None:
    """Answer requests until end of file; in a forked worker, raise :class:`_Child` with its
    options (the worker runs outside this loop)."""
    children: dict[int, int] = {}        # pidfd -> pid
    while True:
        ready, _, _ = select.select([control, *children], [], [])
        for fd in ready:
            if fd in children:
                pid = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                try:
                    _send(control, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
        if control not in ready:
            continue
        msg, fds = _recv(control, 2)
        if msg is None:
            return
        refused = ("a request needs argv, a log and an events descriptor"
                   if "argv" not in msg or len(fds) != 2 else
                   "the spawner runs threads" if threading.active_count() != 1 else None)
        if refused:
            for fd in fds:
                os.close(fd)
            _send(control, {"error": refused})
            continue
        log_fd, events_fd = fds
        argv = [str(x) for x in msg["argv"]] + ["--events", str(events_fd)]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                control.close()
                for fd in children:
                    os.close(fd)
                os.setsid()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.close(null)
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                os.close(log_fd)
                os.chdir(course)
                signal.signal(signal.SIGINT, signal.default_int_handler)
            except BaseException:   # noqa: BLE001 - never back into the spawner's loop
                os._exit(1)
            raise _Child(argv)
        os.close(log_fd)
        os.close(events_fd)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as e:
            _send(control, {"error": f"pidfd_open: {e}"})
            continue
        children[pidfd] = pid
        _send(control, {"pid": pid}, [pidfd])


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m grader.grading.run.spawn")
    p.add_argument("--course", required=True)
    p.add_argument("--control", type=int, required=True)
    a = p.parse_args(argv)
    control = socket.socket(fileno=a.control)
    os.set_inheritable(a.control, False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the pipeline decides; Ctrl-C is its
    course = Path(a.course).resolve()
    t0 = time.process_time()
    warm(course)
    print(f"spawner ready: {time.process_time() - t0:.2f} s of CPU to load the workers' modules",
          flush=True)
    try:
        serve(control, course)
    except _Child as child:     # a forked worker: the worker's own main, then exit as it does
        from . import worker
        sys.argv = ["grader.grading.run.worker", *child.argv]
        return worker.main(child.argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
