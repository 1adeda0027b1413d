"""Tensors of the simulated ``torch`` (:mod:`.torch_api`): ``torch.Tensor``'s names for
where a tensor lives, copies (``to``, ``cuda``, ``cpu``, ``copy_``, ``pin_memory``) and
reading it on the host (``numpy``, ``item``, ``tolist``; a GPU tensor's ``numpy`` raises, as in
PyTorch)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .engine import SimError
from .tensor import SimTensor

__all__ = ["Dtype", "TorchDevice", "TorchTensor", "TENSOR_MODELED"]

TENSOR_MODELED = ("shape, dtype, device, is_cuda, ndim, size(), dim(), numel(), to(), cuda(), "
                  "cpu(), numpy(), item(), tolist(), pin_memory(), is_pinned(), copy_(), "
                  "clone(), detach(), contiguous(), float(), reshape(), view(), t(), mm(), "
                  "matmul(), add(), mul(), sum(), mean(), record_stream(), arithmetic and @")


class Dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    __str__ = __repr__

    @property
    def is_floating_point(self) -> bool:
        return self.name.startswith(("float", "bfloat"))


class TorchDevice:
    def __init__(self, type: str, index: int | None = None) -> None:
        self.type, self.index = type, index

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None
                                               else ")")

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TorchDevice) and (self.type, self.index) == (other.type, other.index)

    __hash__ = object.__hash__


class TorchTensor(SimTensor):
    _FW = "torch"

    def _device_name(self) -> str:
        return "cpu" if self._dev is None else f"cuda:{self._dev}"

    # -- attributes ------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return tuple(self._value.shape)

    @property
    def dtype(self) -> Dtype:
        return self._fw._dtype(self._value.dtype)

    @property
    def device(self) -> TorchDevice:
        return self._fw._devobj(self._dev)

    @property
    def is_cuda(self) -> bool:
        return self._dev is not None

    @property
    def ndim(self) -> int:
        return self._value.ndim

    @property
    def T(self) -> "TorchTensor":
        return self.t()

    @property
    def nbytes(self) -> int:
        return int(self._value.nbytes)

    def size(self, dim: int | None = None):
        return tuple(self._value.shape) if dim is None else self._value.shape[dim]

    def dim(self) -> int:
        return self._value.ndim

    def numel(self) -> int:
        return int(self._value.size)

    def element_size(self) -> int:
        return int(self._value.itemsize)

    def is_pinned(self) -> bool:
        return self._dev is None and self._pinned

    # -- copies ------------------------------------------------------------------------
    def to(self, *args: Any, non_blocking: bool = False, copy: bool = False, **kwargs: Any):
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        if kwargs:
            raise TypeError(f"to() got an unexpected keyword argument {next(iter(kwargs))!r}")
        for a in args:
            if isinstance(a, Dtype):
                dtype = a
            elif isinstance(a, TorchTensor):
                device, dtype = a.device, a.dtype
            elif isinstance(a, bool):
                non_blocking = a
            else:
                device = a
        out = self
        if device is not None:
            dev = self._fw._device_index(device)
            out = (self._to_host(blocking=not non_blocking, pinned=bool(non_blocking))
                   if dev is None else self._to_gpu(dev, blocking=not non_blocking))
        if dtype is not None and np.dtype(dtype.name) != out._value.dtype:
            out = out._elementwise("cast", lambda v: v.astype(dtype.name), out)
        if copy and out is self:
            out = self.clone()
        return out

    def cuda(self, device: Any = None, non_blocking: bool = False) -> "TorchTensor":
        dev = self._fw.cuda.current_device() if device is None else self._fw._device_index(
            device if not isinstance(device, int) else f"cuda:{device}")
        return self._to_gpu(dev, blocking=not non_blocking)

    def cpu(self) -> "TorchTensor":
        return self._to_host(blocking=True, pinned=False)

    def pin_memory(self) -> "TorchTensor":
        if self._dev is not None:
            raise SimError(f"cannot pin '{self._device_name()}' memory: only dense CPU tensors "
                           "can be pinned (copy it with .to('cpu', non_blocking=True))")
        return self._to_host(blocking=True, pinned=True)

    def copy_(self, src: Any, non_blocking: bool = False) -> "TorchTensor":
        return self._copy_from(src, blocking=not non_blocking)

    def numpy(self, force: bool = False) -> np.ndarray:
        if self._dev is not None:
            raise TypeError(f"can't convert {self._device_name()} device type tensor to numpy. "
                            "Use Tensor.cpu() to copy the tensor to host memory first.")
        return self._now_value("numpy()").copy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.numpy(), dtype=dtype)

    def item(self) -> Any:
        v = self._host_read("item()")
        if v.size != 1:
            raise SimError(f"a Tensor with {v.size} elements cannot be converted to Scalar")
        return v.reshape(()).item()

    def tolist(self) -> Any:
        return self._host_read("tolist()").tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __repr__(self) -> str:
        v = self._host_read("print")
        body = np.array2string(v, separator=", ", prefix="tensor(")
        return f"tensor({body}" + (f", device='{self._device_name()}')" if self._dev is not None
                                   else ")")

    __str__ = __repr__

    def record_stream(self, stream: Any) -> None:
        self._fw._stream(stream)   # only checked: the caching allocator is not modeled

    # -- shape and arithmetic ---------------------------------------------------------
    def clone(self) -> "TorchTensor":
        return self._elementwise("copy", lambda v: v.copy(), self)

    def detach(self) -> "TorchTensor":
        return self

    def contiguous(self) -> "TorchTensor":
        return self

    def float(self) -> "TorchTensor":
        return self.to(self._fw.float32)

    def reshape(self, *shape: Any) -> "TorchTensor":
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return self._new(self._value.reshape(shape), self._dev, self._ready_ns, self._pinned)

    view = reshape

    def t(self) -> "TorchTensor":
        return self._new(self._value.T, self._dev, self._ready_ns, self._pinned)

    def mm(self, other: Any) -> "TorchTensor":
        return self._matmul(other)

    def add(self, other: Any) -> "TorchTensor":
        return self + other

    def mul(self, other: Any) -> "TorchTensor":
        return self * other
