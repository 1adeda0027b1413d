"""The two sides' stand-ins for each other's objects, and the exceptions a call can end with.

Part of the judge <-> kernel channel (:mod:`grader.grading.judge.channel`, whose docstring says how
the pieces fit). A :class:`KernelObject` lives in the judge and stands for an object in the
student's kernel; a :class:`JudgeObject` lives in the kernel and stands for one of the judge's.
Both turn what is done to them into requests on their channel. Neither has a ``__float__``,
``__eq__`` or ``__hash__`` of its own: comparing, hashing or printing a ``KernelObject`` runs
nothing anywhere. Names with a leading underscore are never asked for, and the judge refuses
them too (:meth:`grader.grading.judge.channel.Channel._perform`). :func:`denied` names what the judge
never hands to the kernel (modules, classes, ``eval``-like built-ins, functions of ``os``...).
"""
from __future__ import annotations

import builtins
import operator
import os
import traceback
import types
from typing import Any

__all__ = ["RemoteError", "ChannelClosed", "RemoteTimeout", "KernelObject", "JudgeObject",
           "Opaque", "denied", "remote_exception", "where", "OPERATORS"]

_DENIED_MODULES = ("os", "posix", "sys", "subprocess", "shutil", "ctypes", "pickle", "marshal",
                   "importlib", "builtins", "io", "socket", "signal", "runpy", "code", "codeop")
_DENIED_BUILTINS = {"eval", "exec", "compile", "open", "__import__", "getattr", "setattr",
                    "delattr", "globals", "locals", "vars", "breakpoint", "input", "help", "exit",
                    "quit", "memoryview", "type", "object", "super", "classmethod", "staticmethod"}


# What the kernel may ask the judge to do to one of its objects besides calling it and
# reading public attributes (``__judge_ops__`` of the object's class must list it).
OPERATORS = {
    "add": operator.add, "radd": lambda a, b: operator.add(b, a),
    "sub": operator.sub, "rsub": lambda a, b: operator.sub(b, a),
    "mul": operator.mul, "rmul": lambda a, b: operator.mul(b, a),
    "truediv": operator.truediv, "rtruediv": lambda a, b: operator.truediv(b, a),
    "matmul": operator.matmul, "rmatmul": lambda a, b: operator.matmul(b, a),
    "pow": operator.pow, "neg": operator.neg, "pos": operator.pos, "abs": operator.abs,
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "float": float, "int": int,
}


class RemoteError(Exception):
    """The other side raised an exception of a class that is not built in."""

    where = ""


class ChannelClosed(BaseException):
    """The other side went away (the kernel died, or the connection was cut)."""


class RemoteTimeout(BaseException):
    """No reply before the deadline (a student function that never returns)."""


_exception_classes: dict[str, type] = {}


def builtin_exception(name: str) -> type[BaseException] | None:
    """The built-in exception class of that name, if there is one."""
    cls = getattr(builtins, name, None) if name.isidentifier() else None
    return cls if isinstance(cls, type) and issubclass(cls, BaseException) else None


def remote_exception(name: str, message: str, where: str) -> BaseException:
    """An exception to raise for one the other side raised: same built-in class where there is
    one (so ``except NotImplementedError`` still works), :class:`RemoteError` otherwise."""
    base = builtin_exception(name)
    if base is MemoryError:
        return MemoryError(message)
    if base is None or not issubclass(base, Exception):
        base = RemoteError if base is None else BaseException
    key = f"{name}/{base.__name__}"
    cls = _exception_classes.get(key)
    if cls is None:
        bases = (RemoteError,) if base is RemoteError else (
            (RemoteError, base) if issubclass(base, Exception) else (base,))
        cls = type(name if name.isidentifier() else "RemoteError", bases,
                   {"where": "", "__module__": "builtins"})
        _exception_classes[key] = cls
    err = cls(message)
    err.where = where
    return err


_GRADING = os.path.dirname(os.path.abspath(__file__))


def where(exc: BaseException) -> str:
    """`` (line N: code)`` of the line that raised ``exc``: the last frame outside this
    package, so that an error a judge's object raised in a call from the student's code
    names the student's line, not the channel's."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(f.filename).startswith(_GRADING + os.sep)]
    if frames and frames[-1].line:
        return f" (line {frames[-1].lineno}: {frames[-1].line})"
    return str(exc.where) if getattr(exc, "where", "") else ""


class _Proxy:
    """What both sides' stand-ins share: a handle on a channel, calls and public attributes
    go through it."""

    __slots__ = ("_channel", "_handle", "_type", "__weakref__")

    def __init__(self, channel: "Channel", handle: int, type_name: str) -> None:
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "_type", type_name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.request("call", self._handle, args=args, kwargs=kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._channel.request("getattr", self._handle, name=name)

    def __getitem__(self, key: Any) -> Any:
        return self._channel.request("getitem", self._handle, args=(key,))


class KernelObject(_Proxy):
    """In the judge: an object that lives in the student's kernel (see the module docstring)."""

    __slots__ = ()

    def __len__(self) -> int:
        n = self._channel.request("len", self._handle)
        if type(n) is not int or n < 0:
            raise TypeError("len() of a kernel object did not give a count")
        return n

    def __iter__(self):
        items = self._channel.request("iter", self._handle)
        if type(items) is not list:
            raise TypeError("iterating a kernel object did not give a list")
        return iter(items)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("kernel objects are read-only here")

    def __repr__(self) -> str:
        return f"<{self._type} object from the notebook>"

    @property
    def __name__(self) -> str:  # what messages call the student's function
        return self._type if self._type.isidentifier() else "your function"


def _operator(name: str):
    def method(self: "JudgeObject", *args: Any) -> Any:
        return self._channel.request("op", self._handle, name=name, args=args)

    method.__name__ = f"__{name}__"
    return method


class JudgeObject(_Proxy):
    """In the kernel: an object of the judge's (a simulated module, a tensor, a clock...).

    Operators, ``float``/``int`` and ``with`` go to the judge too; it performs them only on
    objects whose class lists them in ``__judge_ops__`` (a simulated tensor, a stream
    context), so for any other object they raise ``TypeError`` as a plain object would."""

    __slots__ = ()

    __add__, __radd__ = _operator("add"), _operator("radd")
    __sub__, __rsub__ = _operator("sub"), _operator("rsub")
    __mul__, __rmul__ = _operator("mul"), _operator("rmul")
    __truediv__, __rtruediv__ = _operator("truediv"), _operator("rtruediv")
    __matmul__, __rmatmul__ = _operator("matmul"), _operator("rmatmul")
    __pow__, __neg__, __pos__, __abs__ = (_operator("pow"), _operator("neg"), _operator("pos"),
                                          _operator("abs"))
    __lt__, __le__, __gt__, __ge__ = (_operator("lt"), _operator("le"), _operator("gt"),
                                      _operator("ge"))
    __float__, __int__ = _operator("float"), _operator("int")

    def __enter__(self) -> Any:
        return self._channel.request("enter", self._handle)

    def __exit__(self, *exc: Any) -> bool:
        return self._channel.request("exit", self._handle) is True

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot set {name!r}: the grader's objects are read-only")

    def __len__(self) -> int:
        return self._channel.request("len", self._handle)

    def __iter__(self):
        return iter(self._channel.request("iter", self._handle))

    def __array__(self, dtype: Any = None, copy: Any = None):
        import numpy as np

        return np.asarray(self._channel.request("array", self._handle), dtype=dtype)

    def __repr__(self) -> str:
        return self._channel.request("repr", self._handle)

    def __str__(self) -> str:
        return self._channel.request("str", self._handle)


class Opaque:
    """Stands in for an object that must not be handed to the notebook."""

    def __init__(self, kind: str) -> None:
        self.kind = kind


def denied(obj: Any) -> bool:
    mod = getattr(obj, "__module__", None) or ""
    if isinstance(obj, (types.BuiltinFunctionType, types.FunctionType, types.MethodType)):
        if mod.split(".")[0] in _DENIED_MODULES:
            return True
        return isinstance(obj, types.BuiltinFunctionType) and getattr(obj, "__name__", "") in _DENIED_BUILTINS
    return False
