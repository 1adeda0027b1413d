"""Values as a JSON tree plus byte buffers, and back (:mod:`grader.wire`)."""
from __future__ import annotations

import dataclasses
import importlib
import math
import sys
import time
from typing import Any, Callable

from .limits import LIMITS, Limits, ProtocolError
from .values import (DTYPE_KINDS, array_of, paddle_module, registered, tensor_framework,
                     value_class)

__all__ = ["Encoder", "Decoder"]


class Encoder:
    """One message's values as a JSON tree + byte buffers.

    ``export(obj) -> (owner, number, type name, callable)`` turns an object sent by
    reference into a handle (a proxy of the other side's object names the other side);
    ``echo`` maps ``id(obj)`` of the objects this side decoded from the request being
    answered to their position in that request (they go back as ``{"e": i}``); ``views``
    maps the storage address of a torch tensor of that request to ``(position, tensor)``."""

    def __init__(self, side: str, export: Callable[[Any], tuple[str, int, str, bool]],
                 echo: dict[int, int] | None = None,
                 views: dict[int, tuple[int, Any]] | None = None, limits: Limits = LIMITS) -> None:
        self.side, self.export, self.echo = side, export, echo or {}
        self.views = views or {}
        self.limits = limits
        self.buffers: list[bytes] = []
        self.memo: list[Any] = []          # by-value objects, in encoding order
        self._seen: dict[int, int] = {}
        self._nodes = 0
        self._bytes = 0

    def encode(self, obj: Any, depth: int = 0) -> Any:
        self._nodes += 1
        if depth > self.limits.depth:
            raise ValueError("value nested too deeply to send")
        if self._nodes > self.limits.nodes:
            raise ValueError(f"value too large to send (more than {self.limits.nodes} values)")
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
        np = sys.modules.get("numpy")
        if t in (list, dict, set, frozenset, tuple):
            n = self._remember(obj)
            if t is dict:
                return {"d": [[self.encode(k, depth + 1), self.encode(v, depth + 1)]
                              for k, v in obj.items()], "n": n}
            tag = {list: "l", tuple: "t", set: "s", frozenset: "z"}[t]
            return {tag: [self.encode(v, depth + 1) for v in obj], "n": n}
        if np is not None and t is np.ndarray and obj.dtype.kind in DTYPE_KINDS:
            n = self._remember(obj)
            return {"a": self._array(obj), "n": n}
        if np is not None and isinstance(obj, np.generic) and obj.dtype.kind in DTYPE_KINDS:
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
        if registered(t):
            n = self._remember(obj)
            fields = {f.name: self.encode(getattr(obj, f.name), depth + 1)
                      for f in dataclasses.fields(obj)}
            return {"v": f"{t.__module__}.{t.__qualname__}", "x": fields, "n": n}
        owner, handle, type_name, is_callable = self.export(obj)
        return {"h": [owner, handle, type_name[:80], is_callable]}

    def _remember(self, obj: Any) -> int:
        self._seen[id(obj)] = len(self.memo)
        self.memo.append(obj)
        return len(self.memo) - 1

    def _buf(self, data: bytes) -> int:
        self._bytes += len(data)
        if self._bytes > self.limits.buffer_bytes:
            raise ValueError(f"value too large to send (more than {self.limits.buffer_bytes} "
                             "bytes of arrays)")
        self.buffers.append(data)
        return len(self.buffers) - 1

    def _array(self, a) -> list:
        a = sys.modules["numpy"].asarray(a)
        if not a.flags.c_contiguous:      # (ascontiguousarray would make a 0-d array 1-d)
            a = a.copy(order="C")
        return [a.dtype.str, list(a.shape), self._buf(a.tobytes())]


class Decoder:
    """Rebuilds the values of one message (see the module docstring for what it can build).

    ``handle(owner, number, type_name, is_callable)`` gives the object for a handle: this
    side's own object when ``owner`` is this side, a proxy otherwise; ``echo(i)`` the
    ``i``-th by-value object of the request this message answers."""

    def __init__(self, side: str, buffers: list[bytes], handle: Callable[..., Any],
                 echo: Callable[[int], Any] | None = None, limits: Limits = LIMITS) -> None:
        self.side, self.buffers, self.handle, self._echo = side, buffers, handle, echo
        self.limits = limits
        self.memo: dict[int, Any] = {}
        self._nodes = 0
        self._deadline = time.monotonic() + limits.seconds
        self._by_hash: dict[int, Any] = {}
        self._collisions = 0

    def decode(self, node: Any, depth: int = 0) -> Any:
        self._nodes += 1
        if depth > self.limits.depth:
            raise ProtocolError("value nested too deeply")
        if self._nodes > self.limits.nodes:
            raise ProtocolError(f"message too large: more than {self.limits.nodes} values")
        if not self._nodes & 4095 and time.monotonic() > self._deadline:
            raise ProtocolError(f"decoding took more than {self.limits.seconds:g} s")
        if node is None or type(node) in (bool, str):
            return node
        if type(node) in (int, float):
            return self._hashed(node)
        if type(node) is not dict:
            raise ProtocolError(f"unexpected node {type(node).__name__}")
        try:
            return self._hashed(self._decode(node, depth))
        except ProtocolError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, OverflowError) as e:
            raise ProtocolError(f"malformed value: {type(e).__name__}: {e}") from None

    def _hashed(self, value: Any) -> Any:
        """``value``, after counting it among the message's values that share its hash."""
        if type(value) in (str, bytes, list, dict, set) or value is None:
            return value   # (str and bytes hashes are salted per process: not predictable)
        try:
            h = hash(value)
        except TypeError:
            return value
        first = self._by_hash.setdefault(h, value)
        if first is not value:
            try:
                same = bool(first == value)
            except Exception:  # noqa: BLE001 - an array-like comparison: count it as distinct
                same = False
            if not same:
                self._collisions += 1
                if self._collisions > self.limits.same_hash:
                    raise ProtocolError(f"more than {self.limits.same_hash} different values "
                                        "share one hash (a hash-collision payload)")
        return value

    def _decode(self, node: dict, depth: int) -> Any:
        d = lambda v: self.decode(v, depth + 1)  # noqa: E731
        if "i" in node:
            if len(str(node["i"])) > self.limits.digits:
                raise ProtocolError(f"an integer of more than {self.limits.digits} digits")
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
        if dtype.kind not in DTYPE_KINDS or dtype.fields is not None or dtype.subdtype:
            raise ProtocolError(f"array dtype {dtype} is not allowed")
        if len(spec[1]) > 32:
            raise ProtocolError("an array of more than 32 dimensions")
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
            paddle = paddle_module()
            t = paddle.to_tensor(a)
            if dtype in ("bfloat16", "float16"):
                t = t.astype(dtype)
            t.stop_gradient = not grad
            return t
        raise ProtocolError(f"unknown framework {fw!r}")

    @staticmethod
    def _value(name: str, fields: dict):
        cls, rebuild = value_class(name)
        want = {f.name for f in dataclasses.fields(cls) if f.init}
        if set(fields) != want:
            raise ProtocolError(f"{name}: fields {sorted(fields)}, expected {sorted(want)}")
        return cls(**(rebuild(fields) if rebuild else fields))
