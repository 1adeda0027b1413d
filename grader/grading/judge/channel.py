"""The channel between the grading judge and a student's kernel: calls both ways, data only.

:mod:`grader.grading.judge.executor` runs a notebook's test cells in nbgrader's own process (the
*judge*), where student code never runs. The tests call the student's functions, which live in
the kernel; the student's functions call back into objects the tests gave them (a virtual
device's ``submit``, a clock, a lambda). This module carries those calls over one Unix socket.

Bootstrap: before each test cell the judge sends the kernel an execute request (not recorded in
the notebook) that runs ``serve("<name>")``. :func:`serve` creates the socket ``<name>`` in the
kernel's working folder (the judge's side may be another user, or the kernel may have no
network: a file in the folder both can reach works everywhere), accepts one connection, removes
the file, and answers requests in the kernel's main thread until the judge says ``stop``.

Each message is a JSON header plus byte buffers in the course's wire format
(:mod:`grader.wire`, with its limits on size, nesting, values, time and hash collisions);
values it cannot carry travel as handles, and the other side gets a proxy
(:mod:`grader.grading.judge.proxies`):

- in the judge, a :class:`KernelObject` (a student's function, or an object it returned): it can
  be called, and its public attributes, items, length and iteration read, each a request to the
  kernel whose answer is again data. It has no ``__float__``, ``__eq__`` or ``__array__`` of
  its own: comparing, hashing or printing it runs nothing anywhere (identity, and a fixed
  repr), and it is never a number;
- in the kernel, a :class:`JudgeObject`: what the kernel may ask of it is the judge's
  allow-list (:mod:`grader.grading.judge.allow`), not a generic ``getattr``/``call``: only
  the course's own functions (called) and the simulated frameworks' objects (the API the
  simulator models, operators and ``with`` where the class lists them in
  ``__judge_ops__``, ``numpy.asarray`` as numbers only) cross as handles; anything else is
  an opaque handle that refuses every request. What the judge keeps for the kernel is
  counted against a :class:`Budget` per job, and the messages waiting in its queues
  against :data:`MAX_QUEUED_BYTES`.

Calls nest and run concurrently: a request carries the id of the request its sender was
serving, and it is run by the thread that waits for that request's reply (so the kernel's own
nested calls stay in its main thread, where an interrupt reaches them); a request from a thread
that serves nothing (a student's worker thread) gets a thread of its own, at most
:data:`MAX_CALL_THREADS` at once: a request beyond them is answered at once with a
``RuntimeError`` saying so (3,000 threads of a notebook calling back at once cannot make
3,000 threads in the judge), and a side that queues more than :data:`MAX_QUEUED` requests
without reading the answers loses the connection. Arrays and tensors
passed by value and changed in place by the callee are copied back into the caller's objects
after the call; a value the callee got and returns comes back as the caller's object.

A student function that raises makes the judge's call raise an exception of the same built-in
class (``NotImplementedError``, ``ValueError``...; other classes: :class:`RemoteError`) with
the student's message and a ``where`` attribute naming the student's line
(:func:`grader.checks.support.call` reads it). ``MemoryError`` arrives as ``MemoryError``; a
kernel that dies or goes silent raises :class:`ChannelClosed` / :class:`RemoteTimeout`, which
are not ``Exception`` s, so no check can mistake them for a wrong answer.
"""
from __future__ import annotations

import itertools
import os
import queue
import socket
import stat
import threading
import time
import types
import warnings
from typing import Any

from ...lab.core.threads import framework_ready, ready_thread_target
from ...wire import (Decoder, Encoder, ProtocolError, accept_one, pack, read_frame,
                     socket_reader)
from .inplace import copy_back, fingerprint, mutable_array, storages
from .proxies import (OPERATORS, ChannelClosed, JudgeObject, KernelObject, Opaque,
                      RemoteError, RemoteTimeout, denied, remote_exception)
from .proxies import where as where_of

__all__ = ["Channel", "KernelObject", "JudgeObject", "RemoteError", "ChannelClosed",
           "RemoteTimeout", "serve", "connect", "bootstrap_code", "source_of"]

MAX_CALL_THREADS = 32   # requests served at once in threads of their own
MAX_QUEUED = 10_000     # requests waiting for one thread (a flood closes the channel)
MAX_QUEUED_BYTES = 256 * 2**20   # what the waiting messages may take, all queues together
NODE_BYTES = 64         # what one JSON value of a header may take once parsed, at most


class Budget:
    """What the judge keeps for the kernel over one job (a judge process grades one
    notebook): objects exported as handles or held as proxies, and the bytes of the
    simulated tensors among them. Past either bound an export raises ``MemoryError``,
    which the student's code sees as the answer to its request."""

    def __init__(self, objects: int = 200_000, nbytes: int = 768 * 2**20) -> None:
        self.objects, self.nbytes = objects, nbytes
        self.used_objects = self.used_bytes = 0
        self._lock = threading.Lock()

    def take(self, obj: Any) -> None:
        value = getattr(obj, "_value", None) if type(obj).__module__.startswith("grader.sim.") else None
        size = int(getattr(value, "nbytes", 0) or 0)
        with self._lock:
            if self.used_objects + 1 > self.objects or self.used_bytes + size > self.nbytes:
                raise MemoryError(
                    f"the grader keeps at most {self.objects} objects and "
                    f"{self.nbytes // 2**20} MiB of tensors for one notebook's calls "
                    f"(it holds {self.used_objects} and {self.used_bytes // 2**20} MiB)")
            self.used_objects += 1
            self.used_bytes += size


JOB_BUDGET = Budget()   # a judge process's, for all its cells (it grades one notebook)


class _Waiter:
    def __init__(self, memo: list[Any]) -> None:
        self.inbox: queue.Queue = queue.Queue(MAX_QUEUED)
        self.memo = memo


class Channel:
    """One end of the connection; ``side`` is ``"j"`` (judge) or ``"k"`` (kernel)."""

    def __init__(self, sock: socket.socket, side: str, namespace: dict | None = None,
                 budget: Budget | None = None, course_modules: tuple[str, ...] = ()) -> None:
        self.sock, self.side = sock, side
        self._more = tuple(course_modules)   # (tests: their own functions as the judge's)
        # the judge's side answers only the allow-list's operations (grader.grading.judge.allow,
        # imported here only: the kernel's side runs this module too)
        self._allow = None
        if side == "j":
            from . import allow

            self._allow = allow
        self.budget = budget if budget is not None else (Budget() if side == "j" else None)
        self._queued_bytes = 0
        self._queued_lock = threading.Lock()
        self.namespace = namespace          # the kernel's globals (kernel side)
        self.deadline: float | None = None  # time.monotonic() limit for replies (judge side)
        self._send_lock = threading.Lock()
        self._exports: dict[int, Any] = {}
        self._export_ids: dict[int, int] = {}
        self._proxies: dict[int, Any] = {}
        self._pending: dict[str, _Waiter] = {}
        self._main: queue.Queue = queue.Queue(MAX_QUEUED)
        self._call_slots = threading.BoundedSemaphore(MAX_CALL_THREADS)
        self._ids = itertools.count(1)
        self._local = threading.local()
        self.closed = threading.Event()
        self.reason = ""
        self._reader = threading.Thread(target=self._read_loop, name=f"remote-{side}", daemon=True)
        self._reader.start()

    # -- handles ------------------------------------------------------------------
    def _export(self, obj: Any) -> tuple[str, int, str, bool]:
        if isinstance(obj, (KernelObject, JudgeObject)):
            if object.__getattribute__(obj, "_channel") is self:   # the other side's own object
                return ("k" if self.side == "j" else "j", object.__getattribute__(obj, "_handle"),
                        object.__getattribute__(obj, "_type"), True)
            obj = Opaque("stale")
        if self._allow is not None:
            if not self._allow.exportable(obj, self._more):
                obj = Opaque(type(obj).__name__)
        elif isinstance(obj, (types.ModuleType, type)) or denied(obj):
            obj = Opaque(type(obj).__name__)
        n = self._export_ids.get(id(obj))
        if n is None:
            if self.budget is not None:
                self.budget.take(obj)
            n = len(self._exports) + 1
            self._exports[n], self._export_ids[id(obj)] = obj, n
        name = getattr(obj, "__name__", None) if callable(obj) else None
        return (self.side, n, str(name if isinstance(name, str) else type(obj).__name__),
                callable(obj))

    def _handle(self, owner: str, number: int, type_name: str, is_callable: bool) -> Any:
        if owner == self.side:
            if number not in self._exports:
                raise ProtocolError(f"unknown handle {number}")
            return self._exports[number]
        proxy = self._proxies.get(number)
        if proxy is None:
            if self.budget is not None:
                self.budget.take(None)
            cls = JudgeObject if self.side == "k" else KernelObject
            proxy = self._proxies[number] = cls(self, number, type_name)
        return proxy

    # -- sending --------------------------------------------------------------------
    def _send(self, header: dict, buffers: list[bytes]) -> None:
        data = pack(header, buffers)
        with self._send_lock:
            if self.closed.is_set():
                raise ChannelClosed(self.reason or "the connection is closed")
            try:
                self.sock.sendall(data)
            except OSError as e:
                self._close(f"sending failed: {e}")
                raise ChannelClosed(self.reason) from None

    def request(self, op: str, target: int | None = None, name: str = "", args: tuple = (),
                kwargs: dict | None = None) -> Any:
        """Ask the other side to do ``op`` on its object ``target``; wait for the answer,
        serving the other side's nested requests in this thread meanwhile."""
        rid = f"{self.side}{next(self._ids)}"
        enc = Encoder(self.side, self._export)
        payload = enc.encode([list(args), dict(kwargs or {})])
        waiter = self._pending[rid] = _Waiter(enc.memo)
        stack = getattr(self._local, "serving", [])
        try:
            self._send({"k": "req", "id": rid, "parent": stack[-1] if stack else None, "op": op,
                        "target": target, "name": name, "v": payload}, enc.buffers)
            while True:
                msg = self._wait(waiter)
                if msg["k"] == "closed":
                    raise ChannelClosed(self.reason or "the connection is closed")
                if msg["k"] == "rep":
                    return self._answer(msg, waiter)
                self._serve_one(msg)
        finally:
            self._pending.pop(rid, None)

    def _wait(self, waiter: _Waiter) -> dict:
        while True:
            if self.closed.is_set() and waiter.inbox.empty():
                raise ChannelClosed(self.reason or "the connection is closed")
            timeout = 0.5
            if self.deadline is not None:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise RemoteTimeout("no answer from the notebook before the time limit")
                timeout = min(timeout, left)
            try:
                return self._dequeued(waiter.inbox.get(timeout=timeout))
            except queue.Empty:
                continue

    def _answer(self, msg: dict, waiter: _Waiter) -> Any:
        if self.side == "j":
            framework_ready()     # decoding may build tensors: Paddle's mode is per thread
        dec = Decoder(self.side, msg["buffers"], self._handle, echo=waiter.memo.__getitem__)
        try:
            for index, node in msg.get("back", []):
                copy_back(waiter.memo[int(index)], dec.decode(node))
            if msg.get("ok"):
                return dec.decode(msg["v"])
            name, message, where = (str(x)[:2000] for x in msg["error"])
        except (ProtocolError, IndexError, TypeError, ValueError) as e:
            raise remote_exception("RuntimeError", f"the notebook sent a malformed answer ({e})",
                                    "") from None
        raise remote_exception(name, message, where)

    # -- serving --------------------------------------------------------------------
    def serve_main(self) -> None:
        """Kernel side: answer the judge's top-level requests in this thread until stopped."""
        while True:
            msg = self._dequeued(self._main.get())
            if msg is None:
                return
            self._serve_one(msg)

    def _serve_one(self, msg: dict) -> None:
        if self.side == "j":
            framework_ready()     # the judge's code may run Paddle in any of its threads
        stack = self._local.__dict__.setdefault("serving", [])
        stack.append(msg["id"])
        dec = Decoder(self.side, msg["buffers"], self._handle)
        snapshots: dict[int, bytes] = {}
        try:
            try:
                args, kwargs = dec.decode(msg["v"])
                snapshots = {i: fingerprint(o) for i, o in dec.memo.items() if mutable_array(o)}
                value = self._perform(str(msg["op"]), msg.get("target"), str(msg.get("name", "")),
                                      args, kwargs)
                ok = True
            except BaseException as e:  # noqa: BLE001 - every failure is the caller's to see
                if isinstance(e, (ChannelClosed, SystemExit)) and self.side == "j":
                    raise
                ok, value = False, e
            echo = {id(o): i for i, o in dec.memo.items()}
            enc = Encoder(self.side, self._export, echo, storages(dec.memo))
            header = {"k": "rep", "id": f"{self.side}{next(self._ids)}", "to": msg["id"], "ok": ok}
            if ok:
                try:
                    header["v"] = enc.encode(value)
                except Exception as e:  # noqa: BLE001 - e.g. nested too deeply
                    ok, value, header["ok"] = False, e, False
            if not ok:
                # the judge's own lines are nothing the student's code could point at
                header["error"] = [_wire_name(value) if self.side == "j" else type(value).__name__,
                                   str(value)[:2000],
                                   where_of(value) if self.side == "k" else ""]
            # arguments changed in place go back by value (after the answer, so that the
            # answer's references to them stay echoes of the caller's objects)
            header["back"] = []
            enc.views = {}     # the values themselves, not views of the caller's tensors
            for i, fp in snapshots.items():
                if fingerprint(dec.memo[i]) != fp:
                    enc.echo.pop(id(dec.memo[i]), None)
                    header["back"].append([i, enc.encode(dec.memo[i])])
            self._send(header, enc.buffers)
        except ChannelClosed:
            pass
        finally:
            stack.pop()

    def _perform(self, op: str, target: Any, name: str, args: list, kwargs: dict) -> Any:
        if op == "global":
            if self.side != "k" or self.namespace is None or name not in self.namespace:
                raise NameError(f"name {name!r} is not defined")
            return self.namespace[name]
        if target not in self._exports:
            raise ProtocolError(f"unknown handle {target!r}")
        obj = self._exports[target]
        if isinstance(obj, Opaque):
            raise PermissionError(f"the grader's {obj.kind} object cannot be used from the notebook")
        if self._allow is not None:
            if op not in self._allow.OPS:
                raise self._allow.NotAllowed(f"the grading channel has no request {op!r}")
            return self._allow.perform(obj, op, name, args, kwargs, OPERATORS, self._more)
        if op == "call":
            if self.side == "k":   # a student's function, as support.call would run it
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return obj(*args, **kwargs)
            return obj(*args, **kwargs)
        if op == "getattr":
            if name.startswith("_") or not name.isidentifier():
                raise AttributeError(f"{name!r} is not available here")
            return getattr(obj, name)
        if op in ("op", "enter", "exit") and self.side == "j":
            key = name if op == "op" else op
            allowed = getattr(type(obj), "__judge_ops__", ())
            if key not in allowed or (op == "op" and key not in OPERATORS):
                raise TypeError(f"unsupported operation {key!r} on the grader's "
                                f"{type(obj).__name__}")
            if op == "enter":
                return obj.__enter__()
            if op == "exit":
                return obj.__exit__(None, None, None)
            return OPERATORS[key](obj, *args[:1])
        if op == "getitem":
            return obj[args[0]]
        if op == "len":
            return len(obj)
        if op == "iter":
            return list(obj)
        if op == "repr":
            return repr(obj)[:2000]
        if op == "str":
            return str(obj)[:2000]
        if op == "source" and self.side == "k":
            import inspect

            return inspect.getsource(obj)
        if op == "array" and self.side == "j":
            import numpy as np

            return np.asarray(obj)
        raise ProtocolError(f"unknown request {op!r}")

    # -- reading --------------------------------------------------------------------
    def _read_loop(self) -> None:
        try:
            read_exact = socket_reader(self.sock)
            got = [0]

            def counted(n: int) -> bytes:
                got[0] += n
                return read_exact(n)

            while True:
                got[0] = 0
                header, buffers = read_frame(counted)
                if not isinstance(header, dict) or header.get("k") not in ("req", "rep"):
                    raise ProtocolError("not a message")
                header["buffers"] = buffers
                header["cost"] = self._cost(got[0], buffers)
                self._route(header)
        except EOFError:
            self._close("the notebook's kernel closed the connection")
        except BaseException as e:  # noqa: BLE001 - garbage, a memory limit: the channel ends
            self._close(f"{type(e).__name__}: {e}")

    @staticmethod
    def _cost(frame_bytes: int, buffers: list[bytes]) -> int:
        """What a message may take while it waits: its buffers, and its header parsed (at
        most :data:`NODE_BYTES` per byte of JSON: every value takes at least one)."""
        nbuf = sum(len(b) for b in buffers)
        return nbuf + (frame_bytes - nbuf) * NODE_BYTES

    def _queue(self, q: queue.Queue, msg: dict) -> None:
        cost = int(msg.get("cost", 0))
        with self._queued_lock:
            if self._queued_bytes + cost > MAX_QUEUED_BYTES:
                raise ProtocolError(f"more than {MAX_QUEUED_BYTES // 2**20} MiB of messages "
                                    "queued without an answer")
            self._queued_bytes += cost
        try:
            q.put_nowait(msg)
        except queue.Full:
            self._dequeued(msg)
            raise

    def _dequeued(self, msg: Any) -> Any:
        if isinstance(msg, dict) and msg.get("cost"):
            with self._queued_lock:
                self._queued_bytes -= int(msg.pop("cost"))
        return msg

    def _route(self, msg: dict) -> None:
        try:
            if msg["k"] == "rep":
                waiter = self._pending.get(str(msg.get("to")))
                if waiter is not None:
                    self._queue(waiter.inbox, msg)
                return
            if msg.get("op") == "stop":
                self._main.put_nowait(None)
                return
            parent = self._pending.get(str(msg.get("parent")))
            if parent is not None:
                self._queue(parent.inbox, msg)
            elif self.side == "k" and msg.get("parent") is None:
                self._queue(self._main, msg)
            elif self._call_slots.acquire(blocking=False):
                threading.Thread(target=ready_thread_target(self._serve_in_thread), args=(msg,),
                                 daemon=True, name=f"remote-{self.side}-call").start()
            else:
                self._send({"k": "rep", "id": f"{self.side}{next(self._ids)}", "to": msg["id"],
                            "ok": False, "back": [],
                            "error": ["RuntimeError", f"too many calls at once (at most "
                                      f"{MAX_CALL_THREADS} from threads of their own)", ""]}, [])
        except queue.Full:
            raise ProtocolError(f"more than {MAX_QUEUED} requests queued without an answer") from None

    def _serve_in_thread(self, msg: dict) -> None:
        try:
            self._serve_one(msg)
        finally:
            self._call_slots.release()

    def _close(self, reason: str) -> None:
        if not self.closed.is_set():
            self.reason = reason
            self.closed.set()
        for q in [self._main, *(w.inbox for w in list(self._pending.values()))]:
            try:
                q.put_nowait(None if q is self._main else {"k": "closed"})
            except queue.Full:   # a flooded queue: make room for the news that it is closed
                try:
                    q.get_nowait()
                    q.put_nowait(None if q is self._main else {"k": "closed"})
                except (queue.Empty, queue.Full):
                    pass

    def stop(self) -> None:
        """Judge side: tell the kernel's :func:`serve` to return, then close."""
        try:
            self._send({"k": "req", "id": "stop", "parent": None, "op": "stop", "v": None}, [])
        except ChannelClosed:
            pass
        self.close()

    def close(self) -> None:
        self._close("closed by this side")
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _wire_name(e: BaseException) -> str:
    """The judge's exception by its nearest built-in class (the allow-list's ``NotAllowed``
    is a ``TypeError`` to the student's code)."""
    import builtins

    for cls in type(e).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return type(e).__name__


def source_of(fn: Any) -> str:
    """The source of a function: asked of the kernel (as a string) for a student's function
    that lives there, ``inspect.getsource`` for any other."""
    import inspect

    if isinstance(fn, KernelObject):
        src = object.__getattribute__(fn, "_channel").request(
            "source", object.__getattribute__(fn, "_handle"))
        if type(src) is not str:
            raise TypeError("the notebook did not send source text")
        return src
    return inspect.getsource(fn)


# -- the kernel's side ----------------------------------------------------------------
def serve(name: str, accept_timeout: float = 60.0) -> None:
    """Run in the kernel by the judge: answer its requests until it says stop."""
    try:
        ns = get_ipython().user_ns  # type: ignore[name-defined]  # noqa: F821
    except NameError:
        import __main__

        ns = __main__.__dict__
    conn = accept_one(name, accept_timeout)   # the judge may be another user
    channel = Channel(conn, "k", namespace=ns)
    try:
        channel.serve_main()
    finally:
        channel.close()


def bootstrap_code(name: str) -> str:
    """What the judge asks the kernel to run before a test cell."""
    return f'__import__("grader.grading.judge.channel", fromlist=["x"]).serve({name!r})\n'


def connect(folder: str | int, name: str, deadline: float, alive=lambda: True,
            budget: Budget | None = None) -> Channel:
    """Judge side: connect to the socket :func:`serve` creates in ``folder`` (a path, or a
    directory fd the caller opened); raises :class:`RemoteTimeout` if it does not appear
    before ``deadline`` (monotonic).

    The folder is the student's: nothing there is followed. ``name`` is opened with
    ``O_PATH | O_NOFOLLOW`` beside the folder's fd, and the judge connects only if that is
    a socket, through ``/proc/self/fd/N`` of that very file (a symbolic link, or a file
    swapped in after the check, is never reached: :class:`ChannelClosed`)."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"bad socket name {name!r}")
    own = not isinstance(folder, int)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY) if own else folder
    try:
        delay = 0.002
        while True:
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=dir_fd)
            except FileNotFoundError:
                fd = None
            except PermissionError:
                raise ChannelClosed("the judge may not look into the notebook's folder (its "
                                    "permissions were changed)") from None
            if fd is not None:
                try:
                    if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                        raise ChannelClosed("the notebook's grading channel is not a socket "
                                            "(a link or a file stands in its place)")
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    try:
                        # /proc/self/fd/N stays short whatever the folder's path (sun_path is
                        # 108 bytes), and names the socket just checked
                        sock.connect(f"/proc/self/fd/{fd}")
                        return Channel(sock, "j", budget=budget)
                    except (FileNotFoundError, ConnectionRefusedError):
                        sock.close()
                    except PermissionError:
                        sock.close()
                        raise ChannelClosed("the notebook's grading channel is closed to the "
                                            "grader (its permissions were changed)") from None
                finally:
                    os.close(fd)
            if time.monotonic() > deadline or not alive():
                raise RemoteTimeout("the notebook's kernel did not open the grading channel")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    finally:
        if own:
            os.close(dir_fd)
