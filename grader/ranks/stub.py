"""One rank of a student's collective code, run alone: every ``dist`` call goes to its relay.

:func:`grader.ranks.relay.run_ranks` starts this (``python -m grader.ranks.stub SOCKET WAIT_S
FRAMEWORK``)
once per rank, in a sandbox of its own when grading (no network, its own folder, nothing
shared with the other ranks), and a trusted relay process per rank
(:mod:`grader.ranks.relay`) connects to ``SOCKET``. The relay sends the rank's number, the
world size, the framework, the student's function (module source or an importable name) and
the rank's input; this process replaces ``torch.distributed`` (or ``paddle.distributed``)
with a stand-in whose ``send``, ``recv``, ``isend``, ``irecv``, ``barrier`` and collectives
are requests to the relay, calls the student's function, and sends back what it returned.

Everything here runs the student's code and is trusted with nothing: the relay performs and
counts every message (the real process group exists only among the relays), so what this
process does to itself (``sys.modules``, frames, the real ``torch.distributed`` imported
under another name) changes no count; and alone in its sandbox it has no other way to
reach another rank. Messages are data only (:mod:`grader.wire`).
"""
from __future__ import annotations

import importlib
import linecache
import os
import socket
import sys
import traceback
import types
from typing import Any

from grader import wire

__all__ = ["main", "Link", "deliver"]

_LINK: "Link | None" = None     # this rank's link, for deliver()

_P2P_HELP = "build it from send and recv (isend / irecv)"


class Link:
    """This rank's connection to its relay: one request, one answer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def call(self, **request: Any) -> dict:
        wire.send_value(self.sock, request)
        answer = wire.recv_value(self.sock)
        if not isinstance(answer, dict):
            raise RuntimeError("the relay sent something that is not an answer")
        if answer.get("error"):
            kind = {"ValueError": ValueError, "TypeError": TypeError,
                    "NotImplementedError": NotImplementedError}.get(answer.get("kind"), RuntimeError)
            raise kind(str(answer["error"]))
        return answer


class Work:
    """What ``isend`` / ``irecv`` return: ``wait()`` asks the relay to finish it."""

    def __init__(self, link: Link, number: int, into: Any, copy) -> None:
        self._link, self._number, self._into, self._copy = link, number, into, copy
        self._done = False

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        if not self._done:
            answer = self._link.call(op="wait", id=self._number)
            if self._into is not None and answer.get("t") is not None:
                self._copy(self._into, answer["t"])
            self._done = True
        return True

    def is_completed(self) -> bool:
        return self._done

    def is_success(self) -> bool:
        return self._done


def _peer(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
        raise TypeError(f"a rank must be an int, not {type(value).__name__}")
    return int(value.__index__())


def _stand_in(framework: str, link: Link, rank: int, world: int) -> types.ModuleType:
    """The ``dist`` module the student's code gets."""
    fw = importlib.import_module(framework)
    name = f"{framework}.distributed"
    mod = types.ModuleType(name, f"{name} as a graded rank sees it: calls go to its relay")

    if framework == "torch":
        def copy(into, t):
            with fw.no_grad():
                into.copy_(t.to(into.dtype).reshape(into.shape))
    else:
        def copy(into, t):
            fw.assign(t.astype(into.dtype).reshape(into.shape), output=into)

    def tensor(t: Any) -> Any:
        if wire.tensor_framework(t) != framework:
            raise TypeError(f"expected a {framework} tensor, got {type(t).__name__}")
        return t

    def isend(tensor_, dst=None, group=None, tag=0, **_):
        return Work(link, link.call(op="isend", peer=_peer(dst), t=tensor(tensor_))["id"], None, copy)

    def irecv(tensor_, src=None, group=None, tag=0, **_):
        answer = link.call(op="irecv", peer=_peer(src), t=tensor(tensor_))
        return Work(link, answer["id"], tensor_, copy)

    def send(tensor_, dst=None, group=None, tag=0, sync_op=True, **_):
        if not sync_op:                      # paddle's send(..., sync_op=False): a task
            return isend(tensor_, dst)
        link.call(op="send", peer=_peer(dst), t=tensor(tensor_))

    def recv(tensor_, src=None, group=None, tag=0, sync_op=True, **_):
        if not sync_op:
            return irecv(tensor_, src)
        answer = link.call(op="recv", peer=_peer(src), t=tensor(tensor_))
        copy(tensor_, answer["t"])
        return answer.get("src")

    def collective(op_name: str):
        def call(*args: Any, **kwargs: Any) -> Any:
            tensors = [a for a in list(args) + list(kwargs.values())
                       if wire.tensor_framework(a) == framework]
            answer = link.call(op="collective", name=op_name, t=tensors,
                               args=[a for a in args if isinstance(a, int)][:2])
            for into, t in zip(tensors, answer.get("t") or []):
                copy(into, t)
            return None
        call.__name__ = op_name
        return call

    ops = {"send": send, "recv": recv, "isend": isend, "irecv": irecv,
           "get_rank": lambda group=None: rank, "get_world_size": lambda group=None: world,
           "is_available": lambda: True, "is_initialized": lambda: True,
           "get_backend": lambda group=None: "gloo",
           "init_process_group": lambda *a, **k: None, "init_parallel_env": lambda *a, **k: None,
           "destroy_process_group": lambda *a, **k: None,
           "barrier": lambda *a, **k: link.call(op="barrier") and None,
           "wait": lambda *a, **k: None,
           "ReduceOp": types.SimpleNamespace(SUM="sum", AVG="avg", MAX="max", MIN="min",
                                             PRODUCT="product", PROD="product")}
    for op_name in ("all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter",
                    "all_to_all", "alltoall", "scatter", "gather", "all_gather_object",
                    "broadcast_object_list"):
        ops[op_name] = collective(op_name)
    for k, v in ops.items():
        setattr(mod, k, v)

    def missing(attr: str):
        raise AttributeError(f"{name}.{attr} is not available in this exercise: {_P2P_HELP}")

    mod.__getattr__ = missing     # type: ignore[attr-defined]
    return mod


def deliver(label: str, results: dict) -> None:
    """Hand the relay a phase's named results as the phase ends (a course driver's
    ``deliver("forward", {"y": y})``): the relay keeps them and stamps every later collective
    with the next phase, so a check reads ``y`` as it was when the forward pass's
    collectives ended. Code of the student's that calls this too gains nothing: a check uses
    the driver's delivery, which comes last, and what came before it is the forward pass."""
    if _LINK is not None:
        _LINK.call(op="deliver", label=str(label),
                   got={str(k): v if type(v) is str else wire.array_of(v) for k, v in results.items()})


def _install(framework: str, stand_in: types.ModuleType) -> None:
    fw = importlib.import_module(framework)
    sys.modules[stand_in.__name__] = stand_in
    setattr(fw, "distributed", stand_in)


def _module(program: dict) -> Any:
    if "source" in program:
        module = types.ModuleType(program["module"])
        module.__file__ = f"<{program['module']}>"
        lines = program["source"].splitlines(keepends=True)
        linecache.cache[module.__file__] = (len(program["source"]), None, lines, module.__file__)
        sys.modules[program["module"]] = module
        exec(compile(program["source"], module.__file__, "exec"), module.__dict__)
    else:
        module = importlib.import_module(program["module"])
    return module


def _driver(program: dict) -> Any:
    """A course function (``"module:function"``, of ``grader.checks``) that runs the student's
    functions itself: ``driver(module, tensors, rank, world)`` returns named tensors."""
    where, _, name = str(program["driver"]).partition(":")
    if not where.startswith("grader.checks."):
        raise ValueError(f"not a course driver: {program['driver']!r}")
    return getattr(importlib.import_module(where), name)


def main(path: str, accept_timeout: float = 120.0, framework: str = "torch") -> int:
    """Serve one rank: import ``framework``, wait for the relay on the socket ``path`` (its
    clock starts when it connects), then run the student's function."""
    importlib.import_module(framework)
    conn = wire.accept_one(path, accept_timeout)   # the relay may be another user
    link = Link(conn)
    global _LINK
    _LINK = link
    start = wire.recv_value(conn)
    rank, world = int(start["rank"]), int(start["world"])
    if start["framework"] != framework:
        raise SystemExit(f"the relay runs {start['framework']}, this rank {framework}")
    try:
        _install(framework, _stand_in(framework, link, rank, world))
        program = start["program"]
        module = _module(program)
        fw = importlib.import_module(framework)

        def tensor_of(a: Any) -> Any:
            return fw.from_numpy(a.copy()) if framework == "torch" else fw.to_tensor(a)

        if "driver" in program:    # named inputs, named results (assignment 10)
            tensors = {str(k): tensor_of(v) for k, v in dict(start["x"]).items()}
            out = _driver(program)(module, tensors, rank, world)
            report: dict = {"op": "result", "got": {str(k): v if type(v) is str else wire.array_of(v)
                                                    for k, v in out.items()}}
        else:
            fn = getattr(module, program["name"])
            x = tensor_of(start["x"])
            out = fn(x, rank, world)
            got = x if out is None else out
            if wire.tensor_framework(got) is None:
                raise TypeError(f"returned a {type(got).__name__}, not a tensor")
            report = {"op": "result", "got": wire.array_of(got)}
    except BaseException as e:  # noqa: BLE001 - the student's error is the rank's result
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        report = {"op": "error", "error": last[:2000],
                  "trace": "".join(traceback.format_exc().splitlines(keepends=True)[-40:])[:20_000]}
    try:
        wire.send_value(conn, report)
    except (OSError, TypeError, ValueError):
        pass
    conn.close()
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    code = main(sys.argv[1], float(sys.argv[2]), sys.argv[3])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)    # skip teardown: framework threads can block it
