"""PyTorch adapter. Same public names, signatures and return types as ``paddle_backend``."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from . import _common
from ._common import parse_spec, process_rss_bytes

NAME = "torch"
LABEL = "PyTorch"


def version() -> str:
    return torch.__version__


def gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def gpu_name(index: int = 0) -> str:
    return torch.cuda.get_device_name(index)


def native_device(spec: str) -> Any:
    kind, index = parse_spec(spec)
    return torch.device("cpu") if kind == "cpu" else torch.device("cuda", index)


def synchronize(spec: str | None = None) -> None:
    """Wait until all queued work on ``spec`` (all GPUs if None) has finished. No-op on CPU."""
    if spec is None:
        for i in range(gpu_count()):
            torch.cuda.synchronize(i)
        return
    kind, index = parse_spec(spec)
    if kind == "gpu":
        torch.cuda.synchronize(index)


def set_num_threads(n: int) -> None:
    torch.set_num_threads(max(1, int(n)))


def get_num_threads() -> int:
    return torch.get_num_threads()


_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
           "bfloat16": torch.bfloat16}


def _dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype {name!r} not one of {sorted(_DTYPES)}") from None


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


def randn(shape: Sequence[int], seed: int = 0, dtype: str = "float32", device: str = "cpu") -> Any:
    """Normal random tensor. Drawn with NumPy so both frameworks get the same numbers."""
    data = np.random.default_rng(seed).standard_normal(tuple(shape)).astype(dtype)
    return from_numpy(data, device)


def zeros(shape: Sequence[int], dtype: str = "float32", device: str = "cpu") -> Any:
    return torch.zeros(tuple(shape), dtype=_dtype(dtype), device=native_device(device))


def from_numpy(array: np.ndarray, device: str = "cpu") -> Any:
    return torch.from_numpy(np.ascontiguousarray(array)).to(native_device(device))


def to_numpy(tensor: Any) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def matmul(a: Any, b: Any) -> Any:
    return torch.matmul(a, b)




def tensor_device(tensor: Any) -> str:
    d = tensor.device
    return "cpu" if d.type == "cpu" else f"gpu:{d.index}"


def nbytes(tensor: Any) -> int:
    return tensor.numel() * tensor.element_size()


def memory_allocated(device: str) -> int:
    """Bytes the framework's allocator holds on a GPU; on the CPU, this process's resident memory."""
    kind, index = parse_spec(device)
    return torch.cuda.memory_allocated(index) if kind == "gpu" else process_rss_bytes()




class Event(_common.Event):
    """Marks a point in a device's queue; ``elapsed_ms`` between two recorded events."""

    @staticmethod
    def _gpu_event() -> Any:
        return torch.cuda.Event(enable_timing=True)












def cuda_version() -> str:
    """The CUDA version the framework was built with ('' for a CPU-only build)."""
    return torch.version.cuda or ""
