"""The wire format: how values cross between processes that do not trust each other.

One message is a JSON tree plus raw byte buffers, framed as ``!IQ`` (buffer count, header
length), the header, then each buffer as ``!Q`` length + bytes (:func:`pack`,
:func:`read_frame`). The grading judge and a student's kernel speak it over a socket
(:mod:`grader.grading.remote`); a rank process that runs student code returns its result in
it (:func:`dumps` / :func:`loads`, :func:`grader.lab.launch.launch`), and an a7 rank talks to
its relay in it (:mod:`grader.lab.relay`). Decoding builds only:

- ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``;
- ``list``, ``tuple``, ``dict``, ``set``, ``frozenset`` (recursively; aliasing and cycles
  through lists and dicts are kept: the same object twice decodes to one object);
- NumPy arrays and scalars of bool, integer, float and complex dtypes (raw bytes + dtype +
  shape, never pickle, never object dtype);
- PyTorch / Paddle tensors (rebuilt from such an array, framework, dtype, requires-grad);
- the course's plain value types: dataclasses that registered themselves with
  :func:`value_type` (``@value_type`` above the class), rebuilt from their fields;
- a torch tensor sharing storage with one the receiver sent (``x.detach()``) as a view of
  the receiver's tensor (checked against its storage's bounds);
- everything else as a *handle*: a number naming an object that stays on its side, for
  which the receiver's ``handle`` callback gives a proxy.

Decoding never runs code that the tree names: no pickle, no constructor the sender picks
(only registered value types; a name not registered yet is looked up by importing its
module only inside ``grader.lab`` and ``grader.checks``, the course's own libraries).

And it is bounded (:class:`Limits`): the header's and the buffers' size, the number of
values, the nesting, the seconds one message may take, and how many distinct values may
share one hash. That last one stops hash-collision payloads (say 50,000 integers that are
multiples of ``2**61 - 1``, all hashing to 0): as dict keys or set elements, or later in a
check's ``set(...)``, they cost quadratic time in C, holding the GIL. A message over a limit
raises :class:`ProtocolError` with the limit's name, which the receiver reports.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import math
import struct
import sys
import time
from typing import Any, Callable

__all__ = ["Limits", "LIMITS", "ProtocolError", "Encoder", "Decoder", "pack", "read_frame",
           "dumps", "loads", "socket_reader", "send_value", "recv_value", "value_type",
           "tensor_framework", "array_of"]


@dataclasses.dataclass(frozen=True)
class Limits:
    header_bytes: int = 32 * 2**20     # the JSON tree of one message
    buffer_bytes: int = 256 * 2**20    # the arrays and bytes of one message, together
    buffers: int = 100_000             # how many buffers one message may carry
    nodes: int = 1_000_000             # values in one message
    depth: int = 64                    # nesting of containers
    seconds: float = 10.0              # decoding one message
    same_hash: int = 256               # distinct values of one message sharing a hash
    digits: int = 4300                 # decimal digits of one integer


LIMITS = Limits()
_HEAD = struct.Struct("!IQ")
_LEN = struct.Struct("!Q")
_DTYPE_KINDS = "biufc"          # bool, int, uint, float, complex: no object, no structured
_LAZY = ("grader.lab.", "grader.checks.")
_VALUE_TYPES: dict[str, tuple[type, Callable[[dict], dict] | None]] = {}


class ProtocolError(Exception):
    """A message that does not follow the protocol, or is over a limit."""


def value_type(cls: type | None = None, *, rebuild: Callable[[dict], dict] | None = None):
    """Class decorator: instances of this dataclass cross by value, rebuilt from their
    fields on the other side (``rebuild(fields)`` may adjust the decoded fields first, e.g.
    a list into the tuple a frozen class needs). Without it they cross as handles."""
    def register(c: type) -> type:
        if not dataclasses.is_dataclass(c):
            raise TypeError(f"{c.__name__} is not a dataclass: only dataclasses are value types")
        _VALUE_TYPES[f"{c.__module__}.{c.__qualname__}"] = (c, rebuild)
        return c
    return register(cls) if cls is not None else register


def _value_class(name: str) -> tuple[type, Callable[[dict], dict] | None]:
    entry = _VALUE_TYPES.get(name)
    module = name.rpartition(".")[0]
    if entry is None and module.startswith(_LAZY) and all(p.isidentifier() for p in module.split(".")):
        try:
            if importlib.util.find_spec(module) is not None:
                importlib.import_module(module)     # the course's library: it registers them
        except ImportError:
            pass
        entry = _VALUE_TYPES.get(name)
    if entry is None:
        raise ProtocolError(f"{name} is not a value type")
    return entry


# -- framing -----------------------------------------------------------------------------
def pack(header: Any, buffers: list[bytes]) -> bytes:
    """One message: the framing, the header as JSON, the buffers."""
    head = json.dumps(header, separators=(",", ":")).encode()
    parts = [_HEAD.pack(len(buffers), len(head)), head]
    for b in buffers:
        parts += [_LEN.pack(len(b)), b]
    return b"".join(parts)


def read_frame(read_exact: Callable[[int], bytes], limits: Limits = LIMITS) -> tuple[Any, list[bytes]]:
    """One message from ``read_exact(n)`` (which returns exactly ``n`` bytes or raises):
    ``(header, buffers)``; :class:`ProtocolError` if it is over a limit or not JSON."""
    nbuf, nhead = _HEAD.unpack(read_exact(_HEAD.size))
    if nhead > limits.header_bytes:
        raise ProtocolError(f"message too large: a header of {nhead} bytes (limit "
                            f"{limits.header_bytes})")
    if nbuf > limits.buffers:
        raise ProtocolError(f"message too large: {nbuf} buffers (limit {limits.buffers})")
    head = read_exact(nhead)
    buffers, total = [], 0
    for _ in range(nbuf):
        (n,) = _LEN.unpack(read_exact(_LEN.size))
        total += n
        if total > limits.buffer_bytes:
            raise ProtocolError(f"message too large: more than {limits.buffer_bytes} bytes of "
                                "arrays")
        buffers.append(read_exact(n))
    try:
        return json.loads(head), buffers
    except RecursionError:
        raise ProtocolError("value nested too deeply (in the message's JSON)") from None
    except ValueError as e:
        raise ProtocolError(f"the header is not JSON ({type(e).__name__}: {e})") from None


def dumps(value: Any) -> bytes:
    """``value`` as one message, by value only (a handle is refused with ``TypeError``)."""
    def refuse(obj: Any):
        raise TypeError(f"cannot send a {type(obj).__name__} as data")

    enc = Encoder("x", refuse)
    return pack(enc.encode(value), enc.buffers)


def loads(data: bytes, limits: Limits = LIMITS) -> Any:
    """The value :func:`dumps` wrote; :class:`ProtocolError` for anything else."""
    view, pos = memoryview(data), [0]

    def read_exact(n: int) -> bytes:
        if pos[0] + n > len(view):
            raise ProtocolError("not a value file: it ends too early")
        pos[0] += n
        return bytes(view[pos[0] - n:pos[0]])

    def no_handles(*_: Any):
        raise ProtocolError("a handle where data was expected")

    try:
        tree, buffers = read_frame(read_exact, limits)
    except struct.error as e:
        raise ProtocolError(f"not a value file: {e}") from None
    return Decoder("x", buffers, no_handles, limits=limits).decode(tree)


def socket_reader(sock) -> Callable[[int], bytes]:
    """``read_exact(n)`` on a stream socket (``EOFError`` when the other side closed it)."""
    def read_exact(n: int) -> bytes:
        chunks, left = [], n
        while left:
            got = sock.recv(min(left, 1 << 20))
            if not got:
                raise EOFError("the other side closed the connection")
            chunks.append(got)
            left -= len(got)
        return b"".join(chunks)
    return read_exact


def send_value(sock, value: Any) -> None:
    """Send ``value`` (data only, as :func:`dumps`) as one message on a stream socket."""
    sock.sendall(dumps(value))


def recv_value(sock, limits: Limits = LIMITS) -> Any:
    """The next message on a stream socket, decoded as data only (no handles)."""
    def no_handles(*_: Any):
        raise ProtocolError("a handle where data was expected")

    tree, buffers = read_frame(socket_reader(sock), limits)
    return Decoder("x", buffers, no_handles, limits=limits).decode(tree)


# -- values ------------------------------------------------------------------------------
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
        entry = _VALUE_TYPES.get(f"{t.__module__}.{t.__qualname__}")
        if entry is not None and entry[0] is t:
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
        if dtype.kind not in _DTYPE_KINDS or dtype.fields is not None or dtype.subdtype:
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
            paddle = importlib.import_module("paddle")
            t = paddle.to_tensor(a)
            if dtype in ("bfloat16", "float16"):
                t = t.astype(dtype)
            t.stop_gradient = not grad
            return t
        raise ProtocolError(f"unknown framework {fw!r}")

    @staticmethod
    def _value(name: str, fields: dict):
        cls, rebuild = _value_class(name)
        want = {f.name for f in dataclasses.fields(cls) if f.init}
        if set(fields) != want:
            raise ProtocolError(f"{name}: fields {sorted(fields)}, expected {sorted(want)}")
        return cls(**(rebuild(fields) if rebuild else fields))
