"""What a student's kernel may ask of the judge's objects: a closed set of typed operations.

Part of the judge <-> kernel channel (:mod:`grader.grading.judge.channel`). The judge hands the
kernel handles on some of its objects (the simulated ``torch``/``paddle`` an answer gets, its
tensors, streams and events, a clock's ``read``, an operation of known cost, a check's probe
function); the kernel's proxies turn what the student's code does to them into requests. This
module is the whole list of what the judge performs for such a request, and of which of its
objects may cross as a handle at all. Nothing else is reachable: there is no generic
``getattr`` or ``call`` on whatever a handle points to.

Objects that may cross as handles (:func:`exportable`), and what may be done to them:

- **a function the course made**: a plain Python function (``def`` or ``lambda``) defined in
  the simulator (``grader.sim``), the checks (``grader.checks``, the course's ``hidden``
  checks) or a test cell: it may be *called*, nothing else (no attribute, so no
  ``__globals__``, ``__closure__`` or ``__code__``);
- **an object of the simulated frameworks**, of one of the classes of :data:`API`: its
  *attributes* named in :data:`API` may be read (each one the framework's public API:
  ``torch.cuda``, ``x.to``, ``e.elapsed_time``...), and reading a method gives a bound
  method that may be *called*; ``len``, items and iteration where its class defines them;
  the operators and ``with`` its class lists in ``__judge_ops__``; ``repr``/``str``;
  and ``numpy.asarray`` where its class defines ``__array__``, answered only with an array
  of numbers (bool, integer, float, complex);
- a *bound method* of such an object, for a name of :data:`API` (``m.clock.read`` too:
  :class:`~grader.sim.engine.VirtualClock` offers only ``read``).

Anything else the judge would have to send by reference (a module, a class, a built-in
function, a NumPy array of objects, a Machine, a method of anything not listed) crosses as
an *opaque* handle, on which every operation is refused with :class:`NotAllowed` (a
``TypeError`` that names the object and the operation, which the student's feedback shows).
Values that are data cross by value (:mod:`grader.wire`), within its limits.
"""
from __future__ import annotations

import inspect
import types
from typing import Any

from ...sim import engine, paddle_api, paddle_tensor, streams, torch_api, torch_tensor

__all__ = ["API", "NotAllowed", "exportable", "perform", "COURSE_MODULES", "OPS"]

# modules whose plain functions may be handed to the kernel (and called by it)
COURSE_MODULES = ("grader.sim", "grader.checks", "hidden", "__judge__")

# the requests the kernel may send about one of the judge's objects
OPS = ("call", "getattr", "getitem", "len", "iter", "op", "enter", "exit", "repr", "str",
       "array")


class NotAllowed(TypeError):
    """The kernel asked the judge for an operation outside the channel's allow-list."""


def _public(cls: type) -> set[str]:
    """The public names a simulated class defines (its own and its simulated bases')."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if (klass.__module__ or "").startswith("grader.sim."):
            names |= {n for n in vars(klass) if not n.startswith("_")}
    return names


# class -> the attributes the kernel may read: the frameworks' public API as the simulator
# models it, plus the public attributes its instances set in __init__
_INSTANCE_ATTRS: dict[type, set[str]] = {
    torch_api.SimTorch: {"cuda", "float32", "float64", "float16", "int32", "int64", "bool",
                         "uint8", "float", "double", "long", "int"},
    torch_api.SimCuda: set(),
    paddle_api.SimPaddle: {"device", *paddle_api.SimPaddle._DTYPES},
    paddle_api._Namespace: {"cuda"},
    torch_tensor.TorchTensor: set(),
    torch_tensor.Dtype: {"name"},
    torch_tensor.TorchDevice: {"type", "index"},
    paddle_tensor.PaddleTensor: set(),
    paddle_tensor.Place: set(),
    paddle_tensor.PaddleDtype: {"name"},
    streams.SimStream: set(),
    streams.SimEvent: set(),
    streams.StreamContext: set(),
    streams.NullContext: set(),
}
API: dict[type, frozenset[str]] = {cls: frozenset(_public(cls) | extra)
                                   for cls, extra in _INSTANCE_ATTRS.items()}
API[engine.VirtualClock] = frozenset({"read"})   # only its bound method crosses
_NO_INSTANCE = {engine.VirtualClock}             # (the clock itself never does: reads counts)


def _course_function(obj: Any, more: tuple[str, ...] = ()) -> bool:
    if type(obj) is not types.FunctionType:
        return False
    mod = obj.__module__ or ""
    return any(mod == m or mod.startswith(m + ".") for m in (*COURSE_MODULES, *more))


def _api_method(obj: Any) -> bool:
    if type(obj) is not types.MethodType:
        return False
    owner, func = obj.__self__, obj.__func__
    names = API.get(type(owner), ())
    return type(func) is types.FunctionType and func.__name__ in names


def exportable(obj: Any, more: tuple[str, ...] = ()) -> bool:
    """Whether ``obj`` may cross to the kernel as a handle (see the module docstring);
    ``more``: modules besides :data:`COURSE_MODULES` whose functions may (tests' own)."""
    cls = type(obj)
    if cls in API and cls not in _NO_INSTANCE:
        return True
    return _course_function(obj, more) or _api_method(obj)


def _defines(cls: type, dunder: str) -> bool:
    return any(dunder in vars(k) for k in cls.__mro__
               if (k.__module__ or "").startswith("grader.sim."))


def _refuse(obj: Any, what: str) -> NotAllowed:
    return NotAllowed(f"the grader's {type(obj).__name__} does not allow {what} from the "
                      "notebook (the grading channel performs only the simulated framework's "
                      "API and calls of the functions a check hands over)")


def perform(obj: Any, op: str, name: str, args: list, kwargs: dict, operators: dict,
            more: tuple[str, ...] = ()) -> Any:
    """Do what the kernel asked (``op`` on the judge's ``obj``), if the allow-list has it;
    :class:`NotAllowed` otherwise."""
    cls = type(obj)
    api = cls in API and cls not in _NO_INSTANCE
    if op == "call":
        if _course_function(obj, more) or _api_method(obj) or (api and _defines(cls, "__call__")):
            return obj(*args, **kwargs)
        raise _refuse(obj, "calling it")
    if op in ("repr", "str"):
        return (repr(obj) if op == "repr" else str(obj))[:2000]
    if not api:
        raise _refuse(obj, f"{_what(op, name)}")
    if op == "getattr":
        if name in API[cls]:
            return getattr(obj, name)
        if not name.startswith("_") and name.isidentifier() and \
                inspect.getattr_static(obj, name, _MISSING) is _MISSING and _defines(cls, "__getattr__"):
            cls.__getattr__(obj, name)      # the simulator's own "does not model" message
        raise AttributeError(f"{name!r} is not available on the grader's {cls.__name__}")
    if op in ("op", "enter", "exit"):
        key = name if op == "op" else op
        if key not in getattr(cls, "__judge_ops__", ()) or (op == "op" and key not in operators):
            raise NotAllowed(f"unsupported operation {key!r} on the grader's {cls.__name__}")
        if op == "enter":
            return obj.__enter__()
        if op == "exit":
            return obj.__exit__(None, None, None)
        return operators[key](obj, *args[:1])
    if op == "getitem" and _defines(cls, "__getitem__"):
        return obj[args[0]]
    if op == "len" and _defines(cls, "__len__"):
        return len(obj)
    if op == "iter" and (_defines(cls, "__iter__") or _defines(cls, "__getitem__")):
        return list(obj)
    if op == "array" and _defines(cls, "__array__"):
        import numpy as np

        out = np.asarray(obj)
        if type(out) is not np.ndarray or out.dtype.kind not in "biufc":
            raise _refuse(obj, "converting it to an array of anything but numbers")
        return out
    raise _refuse(obj, _what(op, name))


_MISSING = object()


def _what(op: str, name: str) -> str:
    return {"getattr": f"reading its attribute {name!r}", "getitem": "indexing it",
            "len": "len()", "iter": "iterating it", "array": "numpy.asarray()",
            "op": f"the operator {name!r}", "enter": "`with`", "exit": "`with`"}.get(
                op, f"the request {op!r}")
