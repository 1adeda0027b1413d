"""The data that crosses between the grading judge and a student's kernel, and nothing else.

:mod:`grader.grading.remote` sends requests and replies between the judge (nbgrader's process,
which never runs student code) and the kernel (which does). Every value is written as a JSON
tree plus raw byte buffers; decoding builds only:

- ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``;
- ``list``, ``tuple``, ``dict``, ``set``, ``frozenset`` (recursively; aliasing and cycles
  through lists and dicts are kept: the same object twice decodes to one object);
- NumPy arrays and scalars of bool, integer, float and complex dtypes (raw bytes +
  dtype + shape, never pickle, never object dtype);
- PyTorch / Paddle tensors (rebuilt from such an array, framework, dtype, requires-grad);
- the course's plain value types in :data:`VALUE_TYPES` (dataclasses rebuilt from their
  fields, e.g. a :class:`grader.lab.Timeline` that ``record_trace`` returns);
- exceptions, as ``(type name, message, where)`` (raised by :mod:`remote` on the caller's
  side);
- a torch tensor sharing storage with one the receiver sent (``x.detach()``) as a view of
  the receiver's tensor (checked against its storage's bounds);
- everything else as a *handle*: a number naming an object that stays on its side. The other
  side gets a proxy (:mod:`remote`), and a handle coming back names the original object.

Decoding a tree never runs code that the tree names: no pickle, no import of a module the
message names (the value types are a fixed table), no call of a constructor the sender picks.
That is what makes it safe to decode what the student's kernel sends. A value that the receiver
itself sent in a request and that comes back in the reply (``echo``) decodes to the receiver's
original object, so identity checks (``a is b``) and in-place changes behave as in one process.
"""
from __future__ import annotations

import builtins
import dataclasses
import importlib
import math
from typing import Any, Callable

__all__ = ["Encoder", "Decoder", "ProtocolError", "VALUE_TYPES", "array_of", "tensor_framework",
           "dumps", "loads", "storages", "mutable_array", "fingerprint", "copy_back"]

MAX_DEPTH = 64
# module.qualname -> (module, attribute): rebuilt from their dataclass fields.
VALUE_TYPES = {
    "grader.lab.timeline.Timeline": ("grader.lab.timeline", "Timeline"),
    "grader.lab.timeline.Interval": ("grader.lab.timeline", "Interval"),
    "grader.lab.workers.TaskRecord": ("grader.lab.workers", "TaskRecord"),
    "grader.lab.planner.cost.Strategy": ("grader.lab.planner", "Strategy"),
    "grader.lab.planner.Strategy": ("grader.lab.planner", "Strategy"),  # before the split
}
_DTYPE_KINDS = "biufc"          # bool, int, uint, float, complex: no object, no structured


class ProtocolError(Exception):
    """A message that does not follow the protocol (from a kernel that was tampered with)."""


def _paddle():
    """Paddle, imported the course's way (``grader.lab.backends.paddle_backend``): without its
    import-time warning and log lines, which would land in a test cell's stderr (where
    nbgrader scores the cell 0) when the kernel first meets a Paddle tensor there."""
    from grader.lab.backends import get_backend

    return get_backend("paddle").paddle


def tensor_framework(obj: Any) -> str | None:
    """``"torch"`` / ``"paddle"`` for a tensor of that framework, ``None`` otherwise (checked
    by the class's module, so that neither framework is imported to find out)."""
    mod = type(obj).__module__ or ""
    if type(obj).__name__ in ("Tensor", "Parameter") and mod.split(".")[0] == "torch":
        return "torch"
    if type(obj).__name__ in ("Tensor", "EagerParamBase") and mod.split(".")[0] == "paddle":
        return "paddle"
    return None


def array_of(obj: Any):
    """A NumPy copy of a tensor's values (bfloat16 and the like as float32)."""
    import numpy as np

    fw = tensor_framework(obj)
    if fw == "torch":
        t = obj.detach().cpu()
        try:
            return t.numpy().copy()
        except TypeError:
            return t.float().numpy()
    if fw == "paddle":
        a = obj.numpy()
        return a.astype(np.float32) if a.dtype.kind not in _DTYPE_KINDS else a.copy()
    return np.array(obj, copy=True)


def _np():
    import sys

    return sys.modules.get("numpy")


class Encoder:
    """One message's values as a JSON tree + byte buffers.

    ``export(obj) -> (owner, number, type name, callable)`` turns an object sent by
    reference into a handle (a proxy of the other side's object names the other side);
    ``echo`` maps ``id(obj)`` of the objects this side decoded from the request being
    answered to their position in that request (they go back as ``{"e": i}``)."""

    def __init__(self, side: str, export: Callable[[Any], tuple[str, int, str, bool]],
                 echo: dict[int, int] | None = None,
                 views: dict[int, tuple[int, Any]] | None = None) -> None:
        self.side, self.export, self.echo = side, export, echo or {}
        self.views = views or {}   # storage address -> (request position, torch tensor)
        self.buffers: list[bytes] = []
        self.memo: list[Any] = []          # by-value objects, in encoding order
        self._seen: dict[int, int] = {}

    def encode(self, obj: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ValueError("value nested too deeply to send")
        t = type(obj)
        if obj is None or t is bool or t is str:
            return obj
        if t is int:
            return obj if abs(obj) < 2 ** 53 else {"i": str(obj)}
        if t is float:
            return obj if math.isfinite(obj) else {"f": repr(obj)}
        if id(obj) in self._seen:
            return {"@": self._seen[id(obj)]}
        if id(obj) in self.echo:
            return {"e": self.echo[id(obj)]}
        if t is complex:
            return {"c": [repr(obj.real), repr(obj.imag)]}
        if t is bytes:
            return {"b": self._buf(obj)}
        np = _np()
        if t in (list, dict, set, frozenset, tuple):
            n = self._remember(obj)
            if t is dict:
                return {"d": [[self.encode(k, depth + 1), self.encode(v, depth + 1)]
                              for k, v in obj.items()], "n": n}
            tag = {list: "l", tuple: "t", set: "s", frozenset: "z"}[t]
            return {tag: [self.encode(v, depth + 1) for v in obj], "n": n}
        if np is not None and t is np.ndarray and obj.dtype.kind in _DTYPE_KINDS:
            n = self._remember(obj)
            return {"a": self._array(obj), "n": n}
        if np is not None and isinstance(obj, np.generic) and obj.dtype.kind in _DTYPE_KINDS:
            return {"g": self._array(np.asarray(obj))}
        fw = tensor_framework(obj)
        if fw == "torch" and self.views and obj.device.type == "cpu":
            base = self.views.get(obj.untyped_storage().data_ptr())
            if base is not None and base[1].dtype == obj.dtype:
                # a new tensor on the storage of one the caller sent (x.detach(), x.view(...)):
                # it comes back as a view of the caller's tensor, so sharing stays visible
                n = self._remember(obj)
                return {"V": [base[0], list(obj.shape), list(obj.stride()), obj.storage_offset()],
                        "n": n}
        if fw:
            n = self._remember(obj)
            grad = (not obj.stop_gradient) if fw == "paddle" else bool(obj.requires_grad)
            return {"T": [fw, str(obj.dtype).replace("torch.", "").replace("paddle.", ""), grad],
                    "a": self._array(array_of(obj)), "n": n}
        name = f"{t.__module__}.{t.__qualname__}"
        if name in VALUE_TYPES and dataclasses.is_dataclass(obj):
            n = self._remember(obj)
            fields = {f.name: self.encode(getattr(obj, f.name), depth + 1)
                      for f in dataclasses.fields(obj)}
            return {"v": name, "x": fields, "n": n}
        owner, handle, type_name, is_callable = self.export(obj)
        return {"h": [owner, handle, type_name[:80], is_callable]}

    def _remember(self, obj: Any) -> int:
        self._seen[id(obj)] = len(self.memo)
        self.memo.append(obj)
        return len(self.memo) - 1

    def _buf(self, data: bytes) -> int:
        self.buffers.append(data)
        return len(self.buffers) - 1

    def _array(self, a) -> list:
        a = _np().asarray(a)
        if not a.flags.c_contiguous:      # (ascontiguousarray would make a 0-d array 1-d)
            a = a.copy(order="C")
        return [a.dtype.str, list(a.shape), self._buf(a.tobytes())]


class Decoder:
    """Rebuilds the values of one message (see the module docstring for what it can build).

    ``handle(owner, number, type_name, is_callable)`` gives the object for a handle: this
    side's own object when ``owner`` is this side, a proxy otherwise; ``echo(i)`` the
    ``i``-th by-value object of the request this message answers."""

    def __init__(self, side: str, buffers: list[bytes], handle: Callable[..., Any],
                 echo: Callable[[int], Any] | None = None) -> None:
        self.side, self.buffers, self.handle, self._echo = side, buffers, handle, echo
        self.memo: dict[int, Any] = {}

    def decode(self, node: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ProtocolError("value nested too deeply")
        if node is None or type(node) in (bool, int, float, str):
            return node
        if type(node) is not dict:
            raise ProtocolError(f"unexpected node {type(node).__name__}")
        try:
            return self._decode(node, depth)
        except ProtocolError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, OverflowError) as e:
            raise ProtocolError(f"malformed value: {type(e).__name__}: {e}") from None

    def _decode(self, node: dict, depth: int) -> Any:
        d = lambda v: self.decode(v, depth + 1)  # noqa: E731
        if "i" in node:
            return int(node["i"])
        if "f" in node:
            if node["f"] not in ("nan", "inf", "-inf"):
                raise ProtocolError("bad float")
            return float(node["f"])
        if "@" in node:
            return self.memo[int(node["@"])]
        if "e" in node:
            if self._echo is None:
                raise ProtocolError("echo outside a reply")
            return self._echo(int(node["e"]))
        if "c" in node:
            return complex(float(node["c"][0]), float(node["c"][1]))
        if "b" in node:
            return bytes(self.buffers[int(node["b"])])
        if "h" in node:
            owner, number, type_name, is_callable = node["h"]
            return self.handle(str(owner), int(number), str(type_name)[:80], bool(is_callable))
        if "l" in node or "d" in node:
            out: Any = [] if "l" in node else {}
            self.memo[int(node["n"])] = out
            if "l" in node:
                out.extend(d(v) for v in node["l"])
            else:
                for k, v in node["d"]:
                    out[d(k)] = d(v)
            return out
        for tag, kind in (("t", tuple), ("s", set), ("z", frozenset)):
            if tag in node:
                out = kind(d(v) for v in node[tag])
                self.memo[int(node["n"])] = out
                return out
        if "V" in node:
            if self._echo is None:
                raise ProtocolError("view outside a reply")
            i, shape, stride, offset = node["V"]
            base = self._echo(int(i))
            if tensor_framework(base) != "torch":
                raise ProtocolError("a view of something that is not a tensor")
            try:
                out = base.detach().as_strided([int(x) for x in shape], [int(x) for x in stride],
                                               int(offset))
            except RuntimeError as e:
                raise ProtocolError(f"bad view: {e}") from None
            self.memo[int(node["n"])] = out
            return out
        if "T" in node:
            fw, dtype, grad = node["T"]
            out = self._tensor(str(fw), str(dtype), bool(grad), self._array(node["a"]))
            self.memo[int(node["n"])] = out
            return out
        if "a" in node:
            out = self._array(node["a"])
            self.memo[int(node["n"])] = out
            return out
        if "g" in node:
            return self._array(node["g"])[()]
        if "v" in node:
            out = self._value(str(node["v"]), {str(k): d(v) for k, v in node["x"].items()})
            self.memo[int(node["n"])] = out
            return out
        raise ProtocolError(f"unknown node {sorted(node)[:3]}")

    def _array(self, spec: list):
        np = importlib.import_module("numpy")
        dtype = np.dtype(str(spec[0]))
        if dtype.kind not in _DTYPE_KINDS or dtype.fields is not None or dtype.subdtype:
            raise ProtocolError(f"array dtype {dtype} is not allowed")
        shape = tuple(int(s) for s in spec[1])
        data = self.buffers[int(spec[2])]
        if any(s < 0 for s in shape) or math.prod(shape) * dtype.itemsize != len(data):
            raise ProtocolError("array size does not match its shape")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()

    @staticmethod
    def _tensor(fw: str, dtype: str, grad: bool, a):
        if not dtype.isidentifier():
            raise ProtocolError(f"bad tensor dtype {dtype!r}")
        if fw == "torch":
            torch = importlib.import_module("torch")
            want = getattr(torch, dtype, None)
            if not isinstance(want, torch.dtype):
                raise ProtocolError(f"bad torch dtype {dtype!r}")
            t = torch.from_numpy(a).to(want)
            return t.requires_grad_(grad) if grad and t.is_floating_point() else t
        if fw == "paddle":
            paddle = _paddle()
            t = paddle.to_tensor(a)
            if dtype in ("bfloat16", "float16"):
                t = t.astype(dtype)
            t.stop_gradient = not grad
            return t
        raise ProtocolError(f"unknown framework {fw!r}")

    @staticmethod
    def _value(name: str, fields: dict):
        if name not in VALUE_TYPES:
            raise ProtocolError(f"{name} is not a value type")
        module, attr = VALUE_TYPES[name]
        cls = getattr(importlib.import_module(module), attr)
        want = {f.name for f in dataclasses.fields(cls) if f.init}
        if set(fields) != want:
            raise ProtocolError(f"{name}: fields {sorted(fields)}, expected {sorted(want)}")
        if attr == "Strategy":
            fields["placements"] = tuple(fields["placements"])
        return cls(**fields)


# -- in-place semantics: what a callee changed, and views of what the caller sent ------------
def storages(memo: dict[int, Any]) -> dict[int, tuple[int, Any]]:
    """Storage address -> (position, tensor) of the torch tensors a request carried."""
    out = {}
    for i, o in memo.items():
        if tensor_framework(o) == "torch" and o.device.type == "cpu":
            out.setdefault(o.untyped_storage().data_ptr(), (i, o))
    return out


def mutable_array(obj: Any) -> bool:
    return type(obj).__name__ == "ndarray" or tensor_framework(obj) is not None


def fingerprint(obj: Any) -> bytes:
    a = array_of(obj)
    return repr((a.shape, a.dtype.str)).encode() + a.tobytes()


def copy_back(orig: Any, new: Any) -> None:
    """Give ``orig`` the values the callee left in its copy (in-place semantics)."""
    fw = tensor_framework(orig)
    try:
        src = array_of(new)
        if fw is None:
            if getattr(orig, "shape", None) == src.shape and orig.flags.writeable:
                orig[...] = src
        elif fw == "torch":
            import torch

            if tuple(orig.shape) == src.shape:
                with torch.no_grad():
                    orig.copy_(torch.from_numpy(src).to(orig.dtype))
        elif tuple(orig.shape) == src.shape:
            paddle = _paddle()
            paddle.assign(paddle.to_tensor(src).astype(orig.dtype), output=orig)
    except (TypeError, ValueError, RuntimeError, AttributeError):
        pass   # a copy-back that cannot apply leaves the caller's object as it was


def builtin_exception(name: str) -> type[BaseException] | None:
    """The built-in exception class of that name, if there is one."""
    cls = getattr(builtins, name, None) if name.isidentifier() else None
    return cls if isinstance(cls, type) and issubclass(cls, BaseException) else None


def dumps(value: Any) -> bytes:
    """``value`` as bytes, by value only (a handle is refused): for data that a process running
    student code hands to the judge in a file (:func:`grader.lab.launch.launch`'s ranks)."""
    import json
    import struct

    def refuse(obj: Any):
        raise TypeError(f"cannot send a {type(obj).__name__} as data")

    enc = Encoder("x", refuse)
    head = json.dumps(enc.encode(value)).encode()
    parts = [struct.pack("!IQ", len(enc.buffers), len(head)), head]
    for b in enc.buffers:
        parts += [struct.pack("!Q", len(b)), b]
    return b"".join(parts)


def loads(data: bytes) -> Any:
    """The value :func:`dumps` wrote; :class:`ProtocolError` for anything else."""
    import json
    import struct

    def no_handles(*_: Any):
        raise ProtocolError("a handle where data was expected")

    try:
        nbuf, nhead = struct.unpack_from("!IQ", data, 0)
        pos = 12 + nhead
        tree = json.loads(data[12:pos])
        buffers = []
        for _ in range(nbuf):
            (n,) = struct.unpack_from("!Q", data, pos)
            buffers.append(data[pos + 8:pos + 8 + n])
            pos += 8 + n
    except (struct.error, ValueError) as e:
        raise ProtocolError(f"not a value file: {e}") from None
    return Decoder("x", buffers, no_handles).decode(tree)
