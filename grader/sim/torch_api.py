"""A simulated ``torch``: the part of PyTorch's API that GPU timing, streams, events and
copies are written with, running on a simulated :class:`~.engine.Machine`.

An answer written as ``def f(torch, ...)`` gets this object as ``torch`` when graded and the
real module on a GPU. What it models: tensors (``torch.tensor``, ``from_numpy``, ``empty``,
``zeros``, ``ones``, ``randn``, ``matmul``, arithmetic, ``.to``, ``.cuda``, ``.cpu``,
``.numpy``, ``.item``, ``.copy_``, ``.pin_memory``) and ``torch.cuda``'s ``synchronize``,
``Stream``, ``stream``, ``current_stream``, ``default_stream``, ``Event``, ``device``,
``set_device``, ``device_count``. Anything else raises an ``AttributeError`` that says the
simulation does not model it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .engine import Event, Machine, SimError, Stream
from .streams import NullContext, SimEvent, SimStream, StreamContext, wrap_stream
from .tensor import SimTensor, admit, scalar_like
from .torch_tensor import TENSOR_MODELED, Dtype, TorchDevice, TorchTensor

__all__ = ["SimTorch"]

_MODELED = ("tensor, as_tensor, from_numpy, empty, empty_like, zeros, zeros_like, ones, "
            "ones_like, randn, matmul, mm, add, mul, sum, stack, device, no_grad, float32 "
            "(and other dtypes), cuda")
_CUDA_MODELED = ("is_available, device_count, current_device, set_device, device, "
                 "synchronize, Stream, stream, current_stream, default_stream, Event, "
                 "get_device_name")


class SimCuda:
    """``torch.cuda``."""

    def __init__(self, fw: "SimTorch") -> None:
        self._fw = fw

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"the simulated torch.cuda does not model torch.cuda.{name}; it "
                             f"models {_CUDA_MODELED}")

    # -- helpers the other classes use ----------------------------------------------
    def _gpu(self, device: Any = None):
        m = self._fw._m
        index = m.current_device if device is None else self._fw._device_index(device)
        if index is None:
            raise SimError("expected a cuda device, got cpu")
        if index >= len(m.gpus):
            raise SimError(self._fw._no_device_message(index))
        return m.gpus[index]

    # -- the API ------------------------------------------------------------------------
    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return len(self._fw._m.gpus)

    def current_device(self) -> int:
        return self._fw._m.current_device

    def set_device(self, device: Any) -> None:
        self._fw._m.current_device = self._gpu(device).index

    def get_device_name(self, device: Any = None) -> str:
        return f"simulated GPU {self._gpu(device).index}"

    def device(self, device: Any) -> StreamContext:
        return StreamContext(self._fw, None, self._gpu(device).index)

    def synchronize(self, device: Any = None) -> None:
        self._gpu(device).synchronize()

    def current_stream(self, device: Any = None) -> SimStream:
        return wrap_stream(self._fw, self._gpu(device).current)

    def default_stream(self, device: Any = None) -> SimStream:
        return wrap_stream(self._fw, self._gpu(device).default)

    def Stream(self, device: Any = None, priority: int = 0, **kwargs: Any) -> SimStream:
        return wrap_stream(self._fw, self._gpu(device).new_stream(priority))

    def stream(self, stream: Any) -> StreamContext:
        return StreamContext(self._fw, None if stream is None else self._fw._stream(stream))

    def Event(self, enable_timing: bool = False, blocking: bool = False,
              interprocess: bool = False) -> SimEvent:
        return SimEvent(self._fw, enable_timing)


class SimTorch:
    """The ``torch`` an answer gets when graded (see the module docstring)."""

    _FW = "torch"
    _tensor_hint = f"it models {TENSOR_MODELED}"
    _names = {"Stream": "torch.cuda.Stream", "Event": "torch.cuda.Event",
              "synchronize": "torch.cuda.synchronize"}

    def __init__(self, machine: Machine) -> None:
        self._m = machine
        self.cuda = SimCuda(self)
        self._rng = np.random.default_rng(0)
        for name in ("float32", "float64", "float16", "int32", "int64", "bool", "uint8"):
            setattr(self, name, Dtype(name))
        self.float, self.double, self.long, self.int = (self.float32, self.float64,
                                                        self.int64, self.int32)
        self.__version__ = "simulated"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"the simulated torch does not model torch.{name}; it models "
                             f"{_MODELED}")

    def __repr__(self) -> str:
        return f"<simulated torch: {len(self._m.gpus)} simulated GPU(s), virtual clock>"

    # -- helpers -------------------------------------------------------------------------
    def _stream(self, stream: Any) -> Stream:
        if stream is None:
            return self.cuda._gpu().current
        if not isinstance(stream, SimStream):
            raise TypeError(f"expected a torch.cuda.Stream, got {type(stream).__name__}")
        return stream._s

    def _event(self, event: Any) -> Event:
        if not isinstance(event, SimEvent):
            raise TypeError(f"expected a torch.cuda.Event, got {type(event).__name__}")
        return event._e

    def _device_object(self, index: int) -> "TorchDevice":
        return self._devobj(index)

    def _devobj(self, index: int | None) -> "TorchDevice":
        """One object per device (identity is what compares through the grading channel)."""
        cache = self.__dict__.setdefault("_devices", {})
        if index not in cache:
            cache[index] = TorchDevice("cpu") if index is None else TorchDevice("cuda", index)
        return cache[index]

    def _device_text(self, index: int) -> str:
        return f"cuda:{index}"

    def _dtype(self, np_dtype: Any) -> Dtype:
        name = np.dtype(np_dtype).name
        return getattr(self, name) if name in self.__dict__ else Dtype(name)

    def _np_dtype(self, dtype: Any, default: str = "float32") -> np.dtype:
        if dtype is None:
            return np.dtype(default)
        if isinstance(dtype, Dtype):
            return np.dtype(dtype.name)
        raise TypeError(f"dtype must be a torch dtype such as torch.float32, not "
                        f"{type(dtype).__name__}")

    def _device_index(self, device: Any) -> int | None:
        """None for the host, the GPU's number otherwise."""
        if isinstance(device, TorchDevice):
            device = str(device)
        if isinstance(device, int) and not isinstance(device, bool):
            return device
        if not isinstance(device, str):
            raise TypeError(f"expected a device such as 'cuda:0' or 'cpu', got "
                            f"{type(device).__name__}")
        kind, _, index = device.partition(":")
        if kind == "cpu" and not index:
            return None
        if kind == "cuda" and (not index or index.isdigit()):
            return int(index) if index else self._m.current_device
        raise SimError(f"Expected one of cpu, cuda device type at start of device string: "
                       f"{device}")

    def _no_device_message(self, index: int) -> str:
        return (f"CUDA error: invalid device ordinal (cuda:{index}; this machine has "
                f"{len(self._m.gpus)} GPU(s))")

    def _wrong_device_message(self, op: str, names: str) -> str:
        return (f"Expected all tensors to be on the same device, but found at least two "
                f"devices, {names}! (in {op}: copy one of them first, e.g. x.to(y.device))")

    def _host(self, data: Any, dtype: Any = None, pinned: bool = False) -> TorchTensor:
        if isinstance(data, SimTensor):
            value = data._now_value("torch.tensor")
        else:
            value = np.array(data)
        if dtype is not None:
            value = value.astype(self._np_dtype(dtype))
        elif value.dtype == np.float64 and not isinstance(data, np.ndarray):
            value = value.astype(np.float32)
        return TorchTensor(self, self._m, value, None, self._m.clock.now_ns, pinned)

    def _place(self, t: TorchTensor, device: Any) -> TorchTensor:
        if device is None:
            return t
        dev = self._device_index(device)
        return t if dev is None else t._to_gpu(dev, blocking=True)

    def _filled(self, shape: tuple, value: Any, dtype: Any, device: Any,
                pin_memory: bool = False) -> TorchTensor:
        shape = admit(self._m, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list))
                      else shape)
        arr = np.broadcast_to(np.asarray(value, self._np_dtype(dtype)), shape).copy()
        dev = None if device is None else self._device_index(device)
        m = self._m
        if dev is None:
            return TorchTensor(self, m, arr, None, m.clock.now_ns, pin_memory)
        blank = TorchTensor(self, m, arr, dev, 0)
        return blank._elementwise("fill", lambda v: v, blank)

    # -- creating tensors -----------------------------------------------------------------
    def tensor(self, data: Any, dtype: Any = None, device: Any = None,
               pin_memory: bool = False, requires_grad: bool = False) -> TorchTensor:
        return self._place(self._host(data, dtype, pin_memory), device)

    def as_tensor(self, data: Any, dtype: Any = None, device: Any = None) -> TorchTensor:
        if isinstance(data, TorchTensor) and dtype is None:
            return data if device is None else data.to(device)
        return self._place(self._host(data, dtype), device)

    def from_numpy(self, array: Any) -> TorchTensor:
        if not isinstance(array, np.ndarray):
            raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
        return self._host(array, self._dtype(array.dtype))

    def empty(self, *size: Any, dtype: Any = None, device: Any = None,
              pin_memory: bool = False, **kwargs: Any) -> TorchTensor:
        size = admit(self._m, size[0] if len(size) == 1 and isinstance(size[0], (tuple, list))
                     else size)
        arr = np.full(size, np.nan, self._np_dtype(dtype)) if self._np_dtype(dtype).kind == "f" \
            else np.zeros(size, self._np_dtype(dtype))
        dev = None if device is None else self._device_index(device)
        return TorchTensor(self, self._m, arr, dev, self._m.clock.now_ns,
                           pinned=pin_memory and dev is None)

    def empty_like(self, t: Any, dtype: Any = None, device: Any = None, **kwargs: Any):
        dev = t.device if device is None else device
        return self.empty(t.shape, dtype=dtype or t.dtype, device=dev)

    def zeros(self, *size: Any, dtype: Any = None, device: Any = None,
              pin_memory: bool = False, **kwargs: Any) -> TorchTensor:
        return self._filled(size, 0, dtype, device, pin_memory)

    def ones(self, *size: Any, dtype: Any = None, device: Any = None,
             pin_memory: bool = False, **kwargs: Any) -> TorchTensor:
        return self._filled(size, 1, dtype, device, pin_memory)

    def zeros_like(self, t: Any, dtype: Any = None, device: Any = None, **kwargs: Any):
        return self.zeros(t.shape, dtype=dtype or t.dtype, device=t.device if device is None else device)

    def ones_like(self, t: Any, dtype: Any = None, device: Any = None, **kwargs: Any):
        return self.ones(t.shape, dtype=dtype or t.dtype, device=t.device if device is None else device)

    def randn(self, *size: Any, dtype: Any = None, device: Any = None, **kwargs: Any):
        size = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        t = self._filled(size, 0, dtype, device)
        t._value = self._rng.standard_normal(size).astype(self._np_dtype(dtype))
        return t

    def manual_seed(self, seed: int) -> None:
        self._rng = np.random.default_rng(int(seed))

    def device(self, type: Any, index: int | None = None) -> TorchDevice:
        if isinstance(type, TorchDevice):
            return type
        return self._devobj(self._device_index(type if index is None else f"{type}:{index}"))

    def no_grad(self) -> NullContext:
        return NullContext()

    inference_mode = no_grad

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, TorchTensor)

    # -- operations ---------------------------------------------------------------------
    def matmul(self, a: Any, b: Any) -> TorchTensor:
        return _tensor(a)._matmul(b)

    mm = matmul

    def add(self, a: Any, b: Any) -> TorchTensor:
        return _tensor(a) + b

    def mul(self, a: Any, b: Any) -> TorchTensor:
        return _tensor(a) * b

    def sum(self, a: Any, *args: Any, **kwargs: Any) -> TorchTensor:
        return _tensor(a).sum(*args, **kwargs)

    def stack(self, tensors: Any, dim: int = 0) -> TorchTensor:
        ts = [_tensor(t) for t in tensors]
        return ts[0]._run("stack", lambda *v: np.stack(v, axis=dim), tuple(ts),
                          work=sum(t._value.size for t in ts),
                          parallel=sum(t._value.size for t in ts))

    def cat(self, tensors: Any, dim: int = 0) -> TorchTensor:
        ts = [_tensor(t) for t in tensors]
        return ts[0]._run("cat", lambda *v: np.concatenate(v, axis=dim), tuple(ts),
                          work=sum(t._value.size for t in ts),
                          parallel=sum(t._value.size for t in ts))


def _tensor(x: Any) -> SimTensor:
    if not isinstance(x, SimTensor):
        raise TypeError(f"expected a Tensor, got {type(x).__name__}"
                        + (" (a number: use a tensor, or the operator)" if scalar_like(x) else ""))
    return x
