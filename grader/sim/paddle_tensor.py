"""Tensors and places of the simulated ``paddle`` (:mod:`.paddle_api`): ``paddle.Tensor``'s
names for where a tensor lives (``place``), copies (``to``, ``cuda``, ``cpu``, ``pin_memory``,
``copy_``) and reading it on the host (``numpy`` of a GPU tensor copies it and waits, as in
Paddle)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .engine import SimError
from .tensor import SimTensor

__all__ = ["Place", "PaddleDtype", "PaddleTensor", "TENSOR_MODELED"]

TENSOR_MODELED = ("place, shape, dtype, ndim, size, numel(), to(), cuda(), cpu(), numpy(), "
                  "pin_memory(), item(), tolist(), copy_(), clone(), detach(), astype(), "
                  "reshape(), t(), matmul(), add(), multiply(), sum(), mean(), arithmetic and @")


class Place:
    """``paddle.CPUPlace()``, ``paddle.CUDAPlace(i)``, ``paddle.CUDAPinnedPlace()``."""

    def __init__(self, kind: str, index: int | None = None) -> None:
        self._kind, self._index = kind, index

    def __repr__(self) -> str:
        return f"Place({self._kind}" + (f":{self._index})" if self._index is not None else ")")

    __str__ = __repr__

    def is_gpu_place(self) -> bool:
        return self._kind == "gpu"

    def is_cpu_place(self) -> bool:
        return self._kind == "cpu"

    def is_cuda_pinned_place(self) -> bool:
        return self._kind == "gpu_pinned"

    def gpu_device_id(self) -> int:
        return self._index if self._index is not None else -1

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Place) and (self._kind, self._index) == (other._kind, other._index)

    __hash__ = object.__hash__


class PaddleDtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"paddle.{self.name}"

    __str__ = __repr__


class PaddleTensor(SimTensor):
    _FW = "paddle"

    def _device_name(self) -> str:
        if self._dev is None:
            return "Place(gpu_pinned)" if self._pinned else "Place(cpu)"
        return f"Place(gpu:{self._dev})"

    @property
    def place(self) -> Place:
        if self._dev is None:
            return self._fw._placeobj("gpu_pinned" if self._pinned else "cpu")
        return self._fw._placeobj("gpu", self._dev)

    @property
    def shape(self) -> list:
        return list(self._value.shape)

    @property
    def dtype(self) -> PaddleDtype:
        return self._fw._dtype(self._value.dtype)

    @property
    def ndim(self) -> int:
        return self._value.ndim

    @property
    def size(self) -> int:
        return int(self._value.size)

    @property
    def stop_gradient(self) -> bool:
        return True

    def numel(self) -> int:
        return int(self._value.size)

    # -- copies ------------------------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> "PaddleTensor":
        non_blocking = kwargs.pop("non_blocking", False)
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        blocking = kwargs.pop("blocking", None)
        if kwargs:
            raise TypeError(f"to() got an unexpected keyword argument {next(iter(kwargs))}")
        rest = list(args)
        if rest and isinstance(rest[0], PaddleTensor):
            device, dtype = rest.pop(0).place, None
        elif rest and (isinstance(rest[0], PaddleDtype) or rest[0] in self._fw._DTYPES):
            dtype = rest.pop(0)
        elif rest:
            device = rest.pop(0)
            if rest and not isinstance(rest[0], bool):
                dtype = rest.pop(0)
        if rest:
            blocking = rest.pop(0)
        blocking = False if (not blocking or non_blocking) else True   # as Paddle 3 does
        out = self
        if device is not None:
            dev, pinned = self._fw._place_of(device)
            out = (self._to_host(blocking=blocking, pinned=pinned) if dev is None
                   else self._to_gpu(dev, blocking=blocking))
        if dtype is not None:
            name = dtype.name if isinstance(dtype, PaddleDtype) else str(dtype)
            if np.dtype(name) != out._value.dtype:
                out = out._elementwise("cast", lambda v: v.astype(name), out)
        return out

    def cuda(self, device_id: int | None = None, blocking: bool = True) -> "PaddleTensor":
        dev = self._fw._m.current_device if device_id is None else int(device_id)
        return self._to_gpu(dev, blocking=blocking)

    def cpu(self) -> "PaddleTensor":
        return self._to_host(blocking=True, pinned=False)

    def pin_memory(self, blocking: bool = True) -> "PaddleTensor":
        if self._dev is None and self._pinned:
            return self
        return self._to_host(blocking=blocking, pinned=True)

    def copy_(self, other: Any, blocking: bool = True) -> "PaddleTensor":
        return self._copy_from(other, blocking=blocking)

    def numpy(self) -> np.ndarray:
        return self._host_read("numpy()")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.numpy(), dtype=dtype)

    def item(self, *args: Any) -> Any:
        v = self._host_read("item()")
        if args:
            return v[args].item() if len(args) > 1 else v.reshape(-1)[args[0]].item()
        if v.size != 1:
            raise SimError(f"only one element tensors can be converted to Python scalars "
                           f"(this one has {v.size})")
        return v.reshape(()).item()

    def tolist(self) -> Any:
        return self._host_read("tolist()").tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __repr__(self) -> str:
        v = self._host_read("print")
        return (f"Tensor(shape={list(v.shape)}, dtype={v.dtype.name}, place={self._device_name()}"
                f", stop_gradient=True,\n       {np.array2string(v, separator=', ')})")

    __str__ = __repr__

    # -- shape and arithmetic -----------------------------------------------------------
    def clone(self) -> "PaddleTensor":
        return self._elementwise("copy", lambda v: v.copy(), self)

    def detach(self) -> "PaddleTensor":
        return self

    def astype(self, dtype: Any) -> "PaddleTensor":
        return self.to(dtype)

    def reshape(self, shape: Any) -> "PaddleTensor":
        return self._new(self._value.reshape(shape), self._dev, self._ready_ns, self._pinned)

    def t(self) -> "PaddleTensor":
        return self._new(self._value.T, self._dev, self._ready_ns, self._pinned)

    def add(self, y: Any) -> "PaddleTensor":
        return self + y

    def multiply(self, y: Any) -> "PaddleTensor":
        return self * y
