"""A simulated ``paddle``: the part of Paddle 3's API that GPU timing, streams, events and
copies are written with, running on a simulated :class:`~.engine.Machine`.

An answer written as ``def f(paddle, ...)`` gets this object as ``paddle`` when graded and
the real module on a GPU. What it models: tensors (``paddle.to_tensor``, ``empty``,
``zeros``, ``ones``, ``full``, ``randn``, ``matmul``, arithmetic, ``.to``, ``.cuda``,
``.cpu``, ``.numpy``, ``.pin_memory``, ``.item``), places (``CPUPlace``, ``CUDAPlace``,
``CUDAPinnedPlace``, ``set_device``) and ``paddle.device``'s ``synchronize``, ``Stream``,
``current_stream``, ``stream_guard``, ``Event`` (also under ``paddle.device.cuda``).
Anything else raises an ``AttributeError`` that says the simulation does not model it.

As in Paddle, tensors are created on the current device (a GPU unless ``set_device('cpu')``),
``.numpy()`` of a GPU tensor copies it to the host and waits, and ``.to(...)`` does not wait
unless ``blocking=True`` (a copy into pageable host memory makes the host wait anyway).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .engine import Event, Machine, SimError, Stream
from .streams import NullContext, SimEvent, SimStream, StreamContext, unmodeled, wrap_stream
from .tensor import SimTensor, admit, scalar_like
from .paddle_tensor import TENSOR_MODELED, PaddleDtype, PaddleTensor, Place

__all__ = ["SimPaddle"]

_MODELED = ("to_tensor, empty, empty_like, zeros, zeros_like, ones, ones_like, full, randn, "
            "matmul, mm, add, multiply, sum, mean, stack, concat, set_device, get_device, "
            "CPUPlace, CUDAPlace, CUDAPinnedPlace, no_grad, seed, float32 (and other dtypes), "
            "device")
_DEVICE_MODELED = ("synchronize, Stream, current_stream, stream_guard, Event, set_device, "
                   "get_device, device_count, cuda")


class _Namespace:
    """``paddle.device`` and ``paddle.device.cuda``."""

    def __init__(self, fw: "SimPaddle", name: str) -> None:
        self._fw, self._name = fw, name
        if name == "paddle.device":
            self.cuda = _Namespace(fw, "paddle.device.cuda")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise unmodeled(self._fw, self._name, name, _DEVICE_MODELED)

    def synchronize(self, device: Any = None) -> None:
        self._fw._gpu(device).synchronize()

    def Stream(self, device: Any = None, priority: int = 2, **kwargs: Any) -> SimStream:
        return wrap_stream(self._fw, self._fw._gpu(device).new_stream(priority))

    def current_stream(self, device: Any = None) -> SimStream:
        return wrap_stream(self._fw, self._fw._gpu(device).current)

    def stream_guard(self, stream: Any = None) -> Any:
        return NullContext() if stream is None else StreamContext(self._fw, self._fw._stream(stream))

    def Event(self, enable_timing: bool = False, blocking: bool = False,
              interprocess: bool = False) -> SimEvent:
        return SimEvent(self._fw, enable_timing)

    def set_device(self, device: Any) -> str:
        return self._fw.set_device(device)

    def get_device(self) -> str:
        return self._fw.get_device()

    def device_count(self) -> int:
        return len(self._fw._m.gpus)


class SimPaddle:
    """The ``paddle`` an answer gets when graded (see the module docstring)."""

    _FW = "paddle"
    _tensor_hint = f"it models {TENSOR_MODELED}"
    _names = {"Stream": "paddle.device.Stream", "Event": "paddle.device.Event",
              "synchronize": "paddle.device.synchronize"}
    _DTYPES = ("float32", "float64", "float16", "int32", "int64", "bool", "uint8")

    def __init__(self, machine: Machine) -> None:
        self._m = machine
        self._on_cpu = False
        self.device = _Namespace(self, "paddle.device")
        self._rng = np.random.default_rng(0)
        for name in self._DTYPES:
            setattr(self, name, PaddleDtype(name))
        self.__version__ = "simulated"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"the simulated paddle does not model paddle.{name}; it models "
                             f"{_MODELED}")

    def __repr__(self) -> str:
        return f"<simulated paddle: {len(self._m.gpus)} simulated GPU(s), virtual clock>"

    # -- helpers -------------------------------------------------------------------------
    def _gpu(self, device: Any = None):
        m = self._m
        if device is None:
            index = m.current_device
        else:
            index, pinned = self._place_of(device)
            if index is None:
                raise SimError(f"expected a GPU place, got {device!r}")
        if index >= len(m.gpus):
            raise SimError(self._no_device_message(index))
        return m.gpus[index]

    def _stream(self, stream: Any) -> Stream:
        if stream is None:
            return self._gpu().current
        if not isinstance(stream, SimStream):
            raise TypeError(f"expected a paddle.device.Stream, got {type(stream).__name__}")
        return stream._s

    def _event(self, event: Any) -> Event:
        if not isinstance(event, SimEvent):
            raise TypeError(f"expected a paddle.device.Event, got {type(event).__name__}")
        return event._e

    def _device_object(self, index: int) -> Place:
        return self._placeobj("gpu", index)

    def _placeobj(self, kind: str, index: int | None = None) -> Place:
        """One object per place (identity is what compares through the grading channel)."""
        cache = self.__dict__.setdefault("_places", {})
        if (kind, index) not in cache:
            cache[kind, index] = Place(kind, index)
        return cache[kind, index]

    def _device_text(self, index: int) -> str:
        return f"gpu:{index}"

    def _dtype(self, np_dtype: Any) -> PaddleDtype:
        name = np.dtype(np_dtype).name
        return getattr(self, name) if name in self.__dict__ else PaddleDtype(name)

    def _np_dtype(self, dtype: Any, default: str = "float32") -> np.dtype:
        if dtype is None:
            return np.dtype(default)
        if isinstance(dtype, PaddleDtype):
            return np.dtype(dtype.name)
        if isinstance(dtype, str) and dtype in self._DTYPES:
            return np.dtype(dtype)
        raise TypeError(f"dtype must be a paddle dtype such as paddle.float32 or 'float32', "
                        f"not {dtype!r}")

    def _place_of(self, device: Any) -> tuple[int | None, bool]:
        """(GPU number or None for the host, pinned host memory?)."""
        if isinstance(device, Place):
            if device._kind == "gpu":
                return device._index, False
            return None, device._kind == "gpu_pinned"
        if isinstance(device, int) and not isinstance(device, bool):
            return device, False
        if isinstance(device, str):
            kind, _, index = device.partition(":")
            if kind == "cpu" and not index:
                return None, False
            if kind == "gpu" and (not index or index.isdigit()):
                return (int(index) if index else self._m.current_device), False
        raise SimError(f"The device must be a string like 'cpu', 'gpu' or 'gpu:x', or a place "
                       f"(got {device!r})")

    def _default_place(self) -> int | None:
        return None if self._on_cpu else self._m.current_device

    def _no_device_message(self, index: int) -> str:
        return (f"(InvalidArgument) Device id must be less than GPU count, but received id "
                f"is: {index}. GPU count is: {len(self._m.gpus)}.")

    def _wrong_device_message(self, op: str, names: str) -> str:
        return (f"(InvalidArgument) the tensors of {op} are on different places, {names}: "
                "copy one of them first, e.g. y.to(x.place)")

    def _new(self, value: np.ndarray, place: Any) -> PaddleTensor:
        m = self._m
        dev, pinned = (self._default_place(), False) if place is None else self._place_of(place)
        host = PaddleTensor(self, m, value, None, m.clock.now_ns, pinned)
        return host if dev is None else host._to_gpu(dev, blocking=True)

    # -- places and devices -----------------------------------------------------------------
    def CPUPlace(self) -> Place:
        return self._placeobj("cpu")

    def CUDAPlace(self, index: int) -> Place:
        return self._placeobj("gpu", int(index))

    def CUDAPinnedPlace(self) -> Place:
        return self._placeobj("gpu_pinned")

    def set_device(self, device: Any) -> str:
        dev, _ = self._place_of(device)
        self._on_cpu = dev is None
        if dev is not None:
            self._gpu(dev)
            self._m.current_device = dev
        return self.get_device()

    def get_device(self) -> str:
        return "cpu" if self._on_cpu else f"gpu:{self._m.current_device}"

    def is_compiled_with_cuda(self) -> bool:
        return True

    def no_grad(self) -> NullContext:
        return NullContext()

    def seed(self, seed: int) -> None:
        self._rng = np.random.default_rng(int(seed))

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, PaddleTensor)

    # -- creating tensors -------------------------------------------------------------------
    def to_tensor(self, data: Any, dtype: Any = None, place: Any = None,
                  stop_gradient: bool = True) -> PaddleTensor:
        if isinstance(data, SimTensor):
            value = data._host_read("to_tensor")
        else:
            value = np.array(data)
            if value.dtype == np.float64 and not isinstance(data, np.ndarray):
                value = value.astype(np.float32)
        if dtype is not None:
            value = value.astype(self._np_dtype(dtype))
        return self._new(value, place)

    def _filled(self, shape: Any, fill: Any, dtype: Any) -> PaddleTensor:
        shape = admit(self._m, shape)
        arr = np.full(shape, fill, self._np_dtype(dtype))
        dev = self._default_place()
        if dev is None:
            return PaddleTensor(self, self._m, arr, None, self._m.clock.now_ns)
        blank = PaddleTensor(self, self._m, arr, dev, 0)
        return blank._elementwise("fill", lambda v: v, blank)

    def empty(self, shape: Any, dtype: Any = None, name: Any = None) -> PaddleTensor:
        shape = admit(self._m, shape)
        np_dtype = self._np_dtype(dtype)
        arr = np.full(shape, np.nan, np_dtype) if np_dtype.kind == "f" else np.zeros(shape, np_dtype)
        return PaddleTensor(self, self._m, arr, self._default_place(), self._m.clock.now_ns)

    def empty_like(self, x: Any, dtype: Any = None, name: Any = None) -> PaddleTensor:
        t = self.empty(x.shape, dtype or x.dtype)
        t._dev, t._pinned = x._dev, x._pinned
        return t

    def zeros(self, shape: Any, dtype: Any = None, name: Any = None) -> PaddleTensor:
        return self._filled(shape, 0, dtype)

    def ones(self, shape: Any, dtype: Any = None, name: Any = None) -> PaddleTensor:
        return self._filled(shape, 1, dtype)

    def full(self, shape: Any, fill_value: Any, dtype: Any = None, name: Any = None):
        return self._filled(shape, fill_value, dtype)

    def zeros_like(self, x: Any, dtype: Any = None, name: Any = None) -> PaddleTensor:
        return x * 0 if dtype is None else (x * 0).astype(dtype)

    def ones_like(self, x: Any, dtype: Any = None, name: Any = None) -> PaddleTensor:
        return x * 0 + 1 if dtype is None else (x * 0 + 1).astype(dtype)

    def randn(self, shape: Any, dtype: Any = None, name: Any = None) -> PaddleTensor:
        t = self._filled(shape, 0, dtype)
        t._value = self._rng.standard_normal(t._value.shape).astype(self._np_dtype(dtype))
        return t

    # -- operations -----------------------------------------------------------------------
    def matmul(self, x: Any, y: Any, transpose_x: bool = False, transpose_y: bool = False,
               name: Any = None) -> PaddleTensor:
        x, y = _tensor(x), _tensor(y)
        return (x.t() if transpose_x else x)._matmul(y.t() if transpose_y else y)

    def mm(self, input: Any, mat2: Any, name: Any = None) -> PaddleTensor:
        return _tensor(input)._matmul(mat2)

    def add(self, x: Any, y: Any, name: Any = None) -> PaddleTensor:
        return _tensor(x) + y

    def multiply(self, x: Any, y: Any, name: Any = None) -> PaddleTensor:
        return _tensor(x) * y

    def sum(self, x: Any, axis: Any = None, dtype: Any = None, keepdim: bool = False,
            name: Any = None) -> PaddleTensor:
        return _tensor(x).sum(axis=axis, keepdims=keepdim)

    def mean(self, x: Any, axis: Any = None, keepdim: bool = False, name: Any = None):
        return _tensor(x).mean(axis=axis, keepdims=keepdim)

    def stack(self, x: Any, axis: int = 0, name: Any = None) -> PaddleTensor:
        ts = [_tensor(t) for t in x]
        n = sum(t._value.size for t in ts)
        return ts[0]._run("stack", lambda *v: np.stack(v, axis=axis), tuple(ts), work=n, parallel=n)

    def concat(self, x: Any, axis: int = 0, name: Any = None) -> PaddleTensor:
        ts = [_tensor(t) for t in x]
        n = sum(t._value.size for t in ts)
        return ts[0]._run("concat", lambda *v: np.concatenate(v, axis=axis), tuple(ts), work=n,
                          parallel=n)


def _tensor(x: Any) -> SimTensor:
    if not isinstance(x, SimTensor):
        raise TypeError(f"expected a Tensor, got {type(x).__name__}"
                        + (" (a number: use paddle.to_tensor or the operator)" if scalar_like(x)
                           else ""))
    return x
