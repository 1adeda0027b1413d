"""Subprocess plumbing shared by CPU workers (:mod:`.workers`) and ranks (:mod:`.launch`).

Both start fresh Python interpreters with :func:`start_python`: never ``fork`` (unsafe
once torch, paddle or CUDA are initialised in the parent) and never multiprocessing's
``spawn`` (it re-imports the caller's ``__main__``, which a notebook does not have). The
child gets a capped number of BLAS/OpenMP threads and the parent's import path
(:func:`child_env`), writes its chatter to a log file (:func:`log_tail` reads it back),
and ends with :func:`exit_now`, skipping interpreter teardown, which framework threads
(torch's and paddle's pools, gloo) can block forever.

Two things cross the process boundary here:

- a failure, as :class:`RemoteFailure`: the exception's type, message and traceback, so
  the parent's error says what went wrong in its first line;
- a function defined in ``__main__`` (a notebook cell, a script), which pickle can only
  send by name and the child cannot import: :func:`portable` sends its code by value
  (:class:`CodeFunction`), with the modules and values it reads.
"""
from __future__ import annotations

import builtins
import dis
import importlib
import marshal
import os
import subprocess
import sys
import traceback
import types
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = ["child_env", "start_python", "log_tail", "exit_now", "stop", "RemoteFailure",
           "CodeFunction", "portable", "callable_of"]

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def child_env(threads: int, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child interpreter: this one's, with ``threads`` BLAS/OpenMP
    threads (set before any framework is imported), Paddle's INFO logging off, this
    process's import path (a notebook's folder, an editable install), then ``extra``."""
    env = dict(os.environ)
    for var in THREAD_VARS:
        env[var] = str(threads)
    env.setdefault("GLOG_minloglevel", "2")
    path = [p for p in sys.path if p] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    env.update(extra or {})
    return env


def start_python(code: str, log_path: str, env: Mapping[str, str], *, stdin: Any = None,
                 new_session: bool = False) -> subprocess.Popen:
    """Run ``python -c code`` with stdout and stderr appended to ``log_path``."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.DEVNULL if stdin is None else stdin,
            stdout=log, stderr=log, env=dict(env), cwd=os.getcwd(),
            start_new_session=new_session)


def log_tail(path: str, lines: int = 15) -> str:
    """The last ``lines`` lines of a child's log, or '' when there is none."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def exit_now(code: int = 0) -> None:
    """End this (child) process at once, after flushing its output."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def stop(procs: Iterable[subprocess.Popen], grace: float = 5.0) -> None:
    """Kill every process still running and reap it."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            pass


@dataclass(frozen=True)
class RemoteFailure:
    """An exception raised in another process, as data (strings only)."""

    type_name: str
    message: str
    traceback: str

    @classmethod
    def from_exception(cls, exc: BaseException) -> "RemoteFailure":
        kind = type(exc)
        name = kind.__qualname__ if kind.__module__ == "builtins" else \
            f"{kind.__module__}.{kind.__qualname__}"
        return cls(name, str(exc), "".join(traceback.format_exception(exc)))

    @classmethod
    def from_data(cls, data: Any) -> "RemoteFailure":
        """Back from :meth:`as_data`; a bare string (an older child) is a traceback."""
        if isinstance(data, (list, tuple)) and len(data) == 3:
            return cls(*(str(d) for d in data))
        text = str(data)
        last = text.strip().splitlines()[-1] if text.strip() else "unknown error"
        name, _, message = last.partition(": ")
        return cls(name, message, text)

    def as_data(self) -> list[str]:
        return [self.type_name, self.message, self.traceback]

    def headline(self, limit: int = 300) -> str:
        """``Type: message`` on one line, shortened to ``limit`` characters."""
        msg = " ".join(self.message.split())
        line = f"{self.type_name}: {msg}" if msg else self.type_name
        return line if len(line) <= limit else line[: limit - 3] + "..."


# -- functions defined in __main__ travel by value ---------------------------------------

_GLOBAL_OPS = {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"}


def _global_names(code: types.CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_OPS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # comprehensions, nested functions, lambdas
            names |= _global_names(const)
    return {n for n in names if isinstance(n, str)}


class CodeFunction:
    """A function from ``__main__``, pickled by value: its code, defaults, and the
    globals it reads (modules by name, functions from ``__main__`` by value, anything
    else pickled as it is). :meth:`rebuild` makes the function again in the child."""

    def __init__(self, fn: types.FunctionType, _seen: dict | None = None) -> None:
        if fn.__closure__:
            raise TypeError(
                f"{fn.__name__}() reads variables of the function it is defined in, which "
                "cannot travel to another process: define it at the top level of a cell")
        seen = {} if _seen is None else _seen
        seen[id(fn)] = self
        self.name, self.qualname = fn.__name__, fn.__qualname__
        self.code = marshal.dumps(fn.__code__)
        self.defaults, self.kwdefaults = fn.__defaults__, fn.__kwdefaults__
        self.modules: dict[str, str] = {}
        self.values: dict[str, Any] = {}
        for name in sorted(_global_names(fn.__code__)):
            if name not in fn.__globals__:
                continue  # a builtin, or a name assigned later
            value = fn.__globals__[name]
            if isinstance(value, types.ModuleType):
                self.modules[name] = value.__name__
            elif isinstance(value, types.FunctionType) and value.__module__ == "__main__":
                self.values[name] = seen.get(id(value)) or CodeFunction(value, seen)
            else:
                self.values[name] = value

    def rebuild(self, _done: dict | None = None) -> types.FunctionType:
        done = {} if _done is None else _done
        if id(self) in done:
            return done[id(self)]
        g: dict[str, Any] = {"__builtins__": builtins, "__name__": "__main__"}
        fn = types.FunctionType(marshal.loads(self.code), g, self.name, self.defaults)
        fn.__kwdefaults__, fn.__qualname__ = self.kwdefaults, self.qualname
        done[id(self)] = fn
        for name, module in self.modules.items():
            g[name] = importlib.import_module(module)
        for name, value in self.values.items():
            g[name] = value.rebuild(done) if isinstance(value, CodeFunction) else value
        return fn

    def __repr__(self) -> str:
        return f"<function {self.qualname} from __main__, sent by value>"


def portable(fn: Any) -> Any:
    """``fn`` as it can be pickled for a child process: functions defined in ``__main__``
    by value (:class:`CodeFunction`), everything else unchanged (pickled by name)."""
    if isinstance(fn, types.FunctionType) and fn.__module__ == "__main__":
        return CodeFunction(fn)
    return fn


def callable_of(fn: Any) -> Any:
    """In the child: what :func:`portable` sent, as a function to call."""
    return fn.rebuild() if isinstance(fn, CodeFunction) else fn
