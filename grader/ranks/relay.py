"""Run a student's rank function where it can only communicate through counted relays.

A check of collective code (assignment 7's ring all-reduce) must know which messages the
ranks really sent. Counting inside the rank processes does not work: they run the student's
code, which can call the real collective under a name no wrapper watches and rewrite the
counts through the caller's frame. So :func:`run_ranks` splits each rank in two:

- a **student rank** (:mod:`grader.ranks.stub`): a process that runs the student's
  function with a stand-in ``torch.distributed`` / ``paddle.distributed``. When grading, it
  runs in a sandbox of its own: the command in ``$COURSE_RANK_ISOLATION`` (a JSON list, set
  by the judge to :mod:`grader.grading.sandbox.rank`) is put in front of it with the rank's
  folder, so it runs as the sandbox's user, without network, seeing only that folder (where
  its socket is): no file, port or process of another rank. Elsewhere (a student's own
  notebook, the tests) it is a plain process.
- a **relay** (:func:`relay_rank`, started by :func:`grader.lab.core.launch.launch`, where the real
  process group is initialised): trusted code only. It gives its student rank the rank's
  number, the world size, the function and the rank's input, then performs each request
  (``send``, ``recv``, ``isend``, ``irecv``, ``wait``, ``barrier``, a collective) on the real
  process group and counts it: peers, messages, elements, collectives called. It returns
  those counts with the values the student's function returned.

Phases (assignment 10's forward and backward pass) are the relay's own count: a course
driver hands the relay a phase's results (``deliver``, e.g. the forward pass's ``y``) when
the phase ends, and the relay stamps each collective with the number of results delivered
before it. A collective stamped after ``y`` was delivered happened after ``y`` was fixed,
so it cannot have shaped ``y``, whoever sent the delivery; there is no request that says
"count what follows as another phase".

The student ranks start first, so their imports overlap the relays' start. Messages between
a relay and its student rank are data only (:mod:`grader.wire`, within its limits). A rank
that never finishes is stopped with the relays at ``timeout``
(:class:`~grader.lab.core.launch.RankTimeout`); a student's exception comes back as that rank's
``"error"`` (the last line of its traceback).
"""
from __future__ import annotations

import ctypes
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from grader import unixsock, wire
from grader.lab.core.launch import RankTimeout, launch

__all__ = ["run_ranks", "relay_rank", "StudentRanks", "ISOLATION_ENV", "STARTUP_S"]

ISOLATION_ENV = "COURSE_RANK_ISOLATION"
JOB_TMP = "COURSE_JOB_TMP"     # set by the grading job (grader.grading.sandbox.setup.job)
MAX_PENDING = 10_000           # isend / irecv not waited for yet
MAX_EVENTS = 64                # collectives and marks recorded with their values
MAX_RESULTS = 256              # named arrays a course driver may return
MAX_PHASES = 256               # results a course driver may deliver before the end
STARTUP_S = 120.0              # starting the ranks' processes (imports) on a busy machine
SOCKET = "rank.sock"           # in each rank's folder, where the rank waits for its relay
_BOOT = ("import os, sys; sys.path.insert(0, {root!r}); "
         "from grader.ranks.stub import main; os._exit(main({sock!r}, {wait!r}, {fw!r}))")


def _die_with_parent(signum: int = signal.SIGKILL) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signum)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _end_with_parent() -> None:
    """The trusted rank launcher (sandbox.rank) gets SIGTERM: it ends the rank, removes its
    control group and exits; a plain student process gets SIGKILL (it could ignore a SIGTERM)."""
    _die_with_parent(signal.SIGTERM)


def temp_root() -> str | None:
    """The job's temporary folder (``$COURSE_JOB_TMP``, removed with the job whatever
    happens), or None for the system's."""
    tmp = os.environ.get(JOB_TMP)
    return tmp if tmp and os.path.isdir(tmp) else None   # not a finished job's


def _python() -> str:
    """This interpreter by a path a sandbox that binds only the real install can run (a
    virtualenv reached through a symbolic link is bound where the link points)."""
    venv = os.path.join(os.path.realpath(sys.prefix), "bin", os.path.basename(sys.executable))
    return venv if os.path.exists(venv) else sys.executable


class StudentRanks:
    """One process per rank running :mod:`grader.ranks.stub`, each in a folder of its
    own (and isolated, see the module docstring); ``sockets[r]`` is where rank ``r`` waits for
    its relay (and ``ended[r]`` a file that says how it ended, once it has). A context
    manager: leaving it kills them and removes their folders."""

    def __init__(self, world: int, wait_s: float, framework: str = "torch") -> None:
        isolation = json.loads(os.environ.get(ISOLATION_ENV) or "null")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.dirs: list[str] = []
        self.sockets: list[str] = []
        self.logs: list[str] = []
        self.ended: list[str] = []      # a file each, written when the process has ended
        self.procs: list[subprocess.Popen] = []
        tmp = temp_root()
        # checked before any process starts: a socket the relay cannot reach would fail
        # every rank of an honest student (grader.unixsock: a long TMPDIR is fine with /proc)
        why = unixsock.problem(os.path.join(tmp or tempfile.gettempdir(),
                                            "course-rank-xxxxxxxx", SOCKET))
        if why:
            raise RuntimeError(f"the ranks cannot start: {why}")
        self._logdir = tempfile.mkdtemp(prefix="course-rank-logs-", dir=tmp)
        env = {k: v for k, v in os.environ.items() if k != ISOLATION_ENV}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            for rank in range(world):
                folder = tempfile.mkdtemp(prefix="course-rank-", dir=tmp)
                sock = os.path.join(folder, SOCKET)
                # the stub binds it by its name in its own folder (its working directory,
                # in the sandbox too): short whatever the folder's path
                stub = [_python(), "-c",
                        _BOOT.format(root=root, sock=SOCKET, wait=wait_s, fw=framework)]
                cmd = [*isolation, folder, "--", *stub] if isolation else stub
                log = os.path.join(self._logdir, f"rank{rank}.log")
                with open(log, "wb") as out:
                    self.procs.append(subprocess.Popen(
                        cmd, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=out,
                        stderr=out,
                        preexec_fn=_end_with_parent if isolation else _die_with_parent))
                self.dirs.append(folder)
                self.sockets.append(sock)
                self.logs.append(log)
                self.ended.append(os.path.join(self._logdir, f"rank{rank}.ended"))
                threading.Thread(target=self._watch, args=(rank,), daemon=True).start()
        except BaseException:
            self.close()
            raise

    def _watch(self, rank: int) -> None:
        """Say (in a file the relay looks at while it waits) that the process has ended."""
        code = self.procs[rank].wait()
        try:
            with open(self.ended[rank] + ".tmp", "w") as f:
                f.write(f"exit code {code}: {self.tail(rank).strip()[-1000:]}")
            os.replace(self.ended[rank] + ".tmp", self.ended[rank])
        except OSError:
            pass     # closed meanwhile

    def wait(self, rank: int, within: float) -> None:
        """Wait (at most ``within`` seconds) for rank ``rank``'s process to end."""
        try:
            self.procs[rank].wait(within)
        except subprocess.TimeoutExpired:
            pass

    def tail(self, rank: int, lines: int = 8) -> str:
        """The last lines rank ``rank``'s process printed (its own errors, a student's prints)."""
        try:
            with open(self.logs[rank], errors="replace") as f:
                return "".join(f.readlines()[-lines:])[-2000:]
        except OSError:
            return ""

    def close(self) -> None:
        """Stop every rank (isolated: SIGTERM to the trusted launcher, which ends the rank and
        removes its control group; then SIGKILL) and remove their folders."""
        isolated = bool(os.environ.get(ISOLATION_ENV))
        for p in self.procs:
            if p.poll() is None:
                p.terminate() if isolated else p.kill()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        for d in [*self.dirs, self._logdir]:
            shutil.rmtree(d, ignore_errors=True)

    def __enter__(self) -> "StudentRanks":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_ranks(program: dict, inputs: list, framework: str = "torch",
              timeout: float = 25.0) -> list[dict]:
    """Run the student's ``fn(x, rank, world_size)`` on ``len(inputs)`` ranks, rank ``r``
    with ``x`` = ``inputs[r]`` as a tensor of ``framework``; each rank's log, in rank order:
    ``got`` (float32 array of what it returned, or ``x`` if it returned ``None``),
    ``sent_to``, ``sent_elems``, ``recvs``, ``collectives``, ``events`` (each collective with
    its tensors' shapes, the values the rank handed over and its ``phase``, in order: at most
    ``MAX_EVENTS``), ``phases`` (each ``{"label", "got"}`` a driver delivered, in order; a
    collective's ``phase`` is how many had been delivered before it), or ``error`` (the
    student's exception). With ``"driver"`` in
    ``program`` (assignment 10), ``inputs[r]`` is a dict of named arrays and ``got`` the
    driver's named results (:func:`grader.ranks.stub.main`). ``program`` is ``{"module": name, "name": fn}`` for an importable function,
    plus ``"source"`` for one that travels as text.

    ``timeout`` bounds each rank's run from the moment its process is ready (starting the
    processes, importing the framework, may take longer on a busy machine, up to
    ``STARTUP_S``): a rank still waiting then ends the run with ``RankTimeout`` naming the
    ranks that were waiting (a deadlock, or an endless loop). ``RankFailed``: a relay failed."""
    world = len(inputs)
    with StudentRanks(world, timeout + STARTUP_S, framework) as ranks:
        ready_by = time.monotonic() + STARTUP_S        # CLOCK_MONOTONIC: every process's
        logs = list(launch(relay_rank, nprocs=world, framework=framework,
                           timeout=timeout + STARTUP_S, tmp_dir=temp_root(),
                           args=(ranks.sockets, ranks.ended, program, list(inputs), ready_by,
                                 timeout),
                           safe_results=True))
        late = [rank for rank, log in enumerate(logs) if log.get("late")]
        if late:
            raise RankTimeout(late, timeout, "")
        for rank, log in enumerate(logs):
            if "error" in log and "ended without" in log["error"]:
                ranks.wait(rank, 10.0)   # its launcher says last how it ended (sandbox.rank)
                if ranks.tail(rank).strip():
                    log["error"] += "\n" + ranks.tail(rank)
    return logs


def _connect(path: str, ended: str, deadline: float) -> socket.socket:
    delay = 0.005
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            unixsock.connect(sock, path)    # any length (a long TMPDIR), never by a link
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
        if os.path.exists(ended):
            with open(ended, errors="replace") as f:
                raise RuntimeError(f"the student's rank ended before it was ready ({f.read()})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the student's rank did not start (no socket {path})")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class _Late(Exception):
    """The rank's time ran out while the relay waited (for the student's process, or for a
    message of another rank)."""


def relay_rank(rank: int, world: int, sockets: list[str], ended: list[str], program: dict,
               inputs: list, ready_by: float, timeout: float) -> dict:
    """One relay (in a rank process of :func:`~grader.lab.core.launch.launch`): serve the student
    rank on ``sockets[rank]`` until it returns a result; perform and count its messages.
    From the moment its student rank is connected it has ``timeout`` seconds; past them it
    returns ``{"late": True, ...}`` (every wait has that deadline: nothing blocks for good)."""
    framework = os.environ["COURSE_FRAMEWORK"]
    if framework == "torch":
        import torch.distributed as dist
    else:
        import paddle.distributed as dist
    sock = _connect(sockets[rank], ended[rank], ready_by)
    log: dict[str, Any] = {"sent_to": [], "sent_elems": 0, "recvs": 0, "collectives": [],
                           "events": [], "phases": []}
    wire.send_value(sock, {"framework": framework, "rank": rank, "world": world,
                           "program": program, "x": inputs[rank]})
    deadline = time.monotonic() + timeout
    pending: dict[int, tuple[Any, Any]] = {}
    try:
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                msg = wire.recv_value(sock)
            except socket.timeout:
                raise _Late from None
            except (EOFError, OSError):
                return {**log, "error": "the rank's process ended without a result (killed, "
                                       "crashed or os._exit)"}
            except wire.ProtocolError as e:
                return {**log, "error": f"the rank sent something that is not a request ({e})"}
            op = msg.get("op") if isinstance(msg, dict) else None
            if op == "result":
                return {**log, "got": _got(msg.get("got"))}
            if op == "error":
                return {**log, "error": str(msg.get("error"))[:2000]}
            try:
                answer = _perform(dist, framework, rank, world, msg, log, pending, deadline)
            except (ValueError, TypeError, KeyError, NotImplementedError, RuntimeError) as e:
                answer = {"error": f"{e}"[:2000] or type(e).__name__, "kind": type(e).__name__}
            sock.settimeout(None)
            wire.send_value(sock, answer)
    except _Late:
        return {**log, "late": True}


def _finish(work: Any, deadline: float) -> Any:
    """Wait for an asynchronous send, receive or collective, until the rank's deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Late
    try:
        work.wait(datetime.timedelta(seconds=left))
    except RuntimeError as e:
        if time.monotonic() >= deadline - 0.1 or "timed out" in str(e).lower() or "timeout" in str(e).lower():
            raise _Late from None
        raise
    return work


def _got(value: Any):
    import numpy as np

    if isinstance(value, dict):       # a course driver's named results (assignment 10)
        if len(value) > MAX_RESULTS or not all(type(k) is str for k in value):
            raise ValueError(f"the rank's results are not at most {MAX_RESULTS} named arrays")
        return {k: v[:2000] if type(v) is str else _array(v) for k, v in value.items()}
    return _array(value).reshape(-1)


def _array(value: Any):
    import numpy as np

    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        raise ValueError("the rank's result is not a numeric array")
    return value.astype(np.float32)


def _peer(value: Any, rank: int, world: int, any_source: bool = False) -> int | None:
    if value is None and any_source:
        return None
    if type(value) is not int or not 0 <= value < world or value == rank:
        raise ValueError(f"a peer must be another rank: an int in 0..{world - 1} other than "
                         f"{rank}, not {value!r}")
    return value


def _tensor(value: Any, framework: str) -> Any:
    if wire.tensor_framework(value) != framework:
        raise TypeError(f"expected a {framework} tensor")
    if framework == "torch":
        return value.detach().contiguous()
    value.stop_gradient = True
    return value


def _perform(dist, framework: str, rank: int, world: int, msg: dict, log: dict,
             pending: dict, deadline: float) -> dict:
    op = msg.get("op")
    if op in ("send", "isend"):
        peer, t = _peer(msg.get("peer"), rank, world), _tensor(msg.get("t"), framework)
        log["sent_to"].append(peer)
        log["sent_elems"] += int(t.numel())
        work = dist.isend(t, peer)
        if op == "send":
            _finish(work, deadline)
            return {}
        return {"id": _pend(pending, work, None, log)}
    if op in ("recv", "irecv"):
        peer = _peer(msg.get("peer"), rank, world, any_source=framework == "torch" and op == "recv")
        buf = _tensor(msg.get("t"), framework)
        log["recvs"] += 1
        work = dist.irecv(buf, peer)
        if op == "recv":
            _finish(work, deadline)
            src = work.source_rank() if peer is None else peer
            return {"t": buf, "src": src}
        return {"id": _pend(pending, work, buf, log)}
    if op == "wait":
        work, buf = pending.pop(msg.get("id"), (None, None))
        if work is None:
            raise ValueError("wait() on a request that is not pending")
        _finish(work, deadline)
        return {"t": buf}
    if op == "deliver":   # a phase's results (a10: the forward pass's y): fixed from now on
        got = msg.get("got")
        if not isinstance(got, dict):
            raise ValueError("a phase's results are named arrays")
        if len(log["phases"]) >= MAX_PHASES:
            raise ValueError(f"more than {MAX_PHASES} phases delivered")
        log["phases"].append({"label": str(msg.get("label"))[:40], "got": _got(got)})
        return {}
    if op == "barrier":
        _finish(_async(dist, framework, "barrier"), deadline)
        return {}
    if op == "collective":
        name, tensors = str(msg.get("name"))[:40], msg.get("t") or []
        log["collectives"].append(name)
        tensors = [_tensor(t, framework) for t in tensors]
        _event(log, {"name": name, "shapes": [list(t.shape) for t in tensors],
                     "t": [wire.array_of(t) for t in tensors]})
        ints = [a for a in msg.get("args") or [] if type(a) is int]
        if name == "all_reduce" and len(tensors) == 1:
            _finish(_async(dist, framework, "all_reduce", tensors[0]), deadline)
        elif name == "broadcast" and len(tensors) == 1 and ints:
            _finish(_async(dist, framework, "broadcast", tensors[0], _peer(ints[0], -1, world)),
                    deadline)
        else:
            raise NotImplementedError(f"dist.{name} is not available in this exercise: build "
                                      "it from send and recv")
        return {"t": tensors}
    raise ValueError(f"unknown request {op!r}")


def _event(log: dict, event: dict) -> None:
    """Record a collective (its name, its tensors' shapes and the values it was given), in
    order, stamped with the phase the relay counts it in (results delivered before it);
    past ``MAX_EVENTS`` only the count grows."""
    event["phase"] = len(log["phases"])
    if len(log["events"]) < MAX_EVENTS:
        log["events"].append(event)
    else:
        log["more_events"] = log.get("more_events", 0) + 1


def _async(dist, framework: str, name: str, *args: Any) -> Any:
    """``dist.<name>(*args)`` started asynchronously (each framework says so its own way)."""
    flag = {"async_op": True} if framework == "torch" else {"sync_op": False}
    return getattr(dist, name)(*args, **flag)


def _pend(pending: dict, work: Any, buf: Any, log: dict) -> int:
    if len(pending) >= MAX_PENDING:
        raise RuntimeError(f"more than {MAX_PENDING} isend / irecv not waited for")
    number = len(log["sent_to"]) + log["recvs"]        # one per message: never reused
    pending[number] = (work, buf)
    return number
