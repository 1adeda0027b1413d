"""PaddlePaddle adapter. Same public names, signatures and return types as ``torch_backend``."""
from __future__ import annotations

import os
import warnings
from typing import Any, Sequence

import numpy as np

# Paddle warns on import when ccache is missing (it only matters for compiling C++
# extensions) and logs glog lines; neither says anything about the experiments.
os.environ.setdefault("GLOG_minloglevel", "2")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import paddle

from . import _common
from ._common import parse_spec, process_rss_bytes

NAME = "paddle"
LABEL = "PaddlePaddle"


def version() -> str:
    return paddle.__version__


def gpu_count() -> int:
    if not paddle.is_compiled_with_cuda():
        return 0
    return int(paddle.device.cuda.device_count())


def gpu_name(index: int = 0) -> str:
    return paddle.device.cuda.get_device_name(index)


def native_device(spec: str) -> Any:
    kind, index = parse_spec(spec)
    return paddle.CPUPlace() if kind == "cpu" else paddle.CUDAPlace(index)


def synchronize(spec: str | None = None) -> None:
    """Wait until all queued work on ``spec`` (all GPUs if None) has finished. No-op on CPU."""
    if spec is None:
        for i in range(gpu_count()):
            paddle.device.cuda.synchronize(i)
        return
    kind, index = parse_spec(spec)
    if kind == "gpu":
        paddle.device.cuda.synchronize(index)


def set_num_threads(n: int) -> None:
    # Paddle's CPU kernels read this; OMP_NUM_THREADS covers the OpenMP ones.
    n = max(1, int(n))
    paddle.base.core.set_num_threads(n)
    os.environ["OMP_NUM_THREADS"] = str(n)
    global _threads
    _threads = n


_threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))


def get_num_threads() -> int:
    return _threads


_DTYPES = ("float32", "float64", "float16", "bfloat16")


def manual_seed(seed: int) -> None:
    paddle.seed(seed)


def randn(shape: Sequence[int], seed: int = 0, dtype: str = "float32", device: str = "cpu") -> Any:
    """Normal random tensor. Drawn with NumPy so both frameworks get the same numbers."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} not one of {sorted(_DTYPES)}")
    data = np.random.default_rng(seed).standard_normal(tuple(shape)).astype(dtype)
    return from_numpy(data, device)


def zeros(shape: Sequence[int], dtype: str = "float32", device: str = "cpu") -> Any:
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} not one of {sorted(_DTYPES)}")
    return paddle.zeros(list(shape), dtype=dtype).to(_place_str(device))


def _place_str(device: str) -> str:
    kind, index = parse_spec(device)
    return "cpu" if kind == "cpu" else f"gpu:{index}"


def from_numpy(array: np.ndarray, device: str = "cpu") -> Any:
    # Always give the place explicitly: paddle.to_tensor's default follows the global
    # paddle.set_device, which is exactly the hidden state this course avoids.
    return paddle.to_tensor(np.ascontiguousarray(array), place=native_device(device))


def to_numpy(tensor: Any) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def matmul(a: Any, b: Any) -> Any:
    return paddle.matmul(a, b)




def tensor_device(tensor: Any) -> str:
    place = tensor.place
    if place.is_gpu_place():
        return f"gpu:{place.gpu_device_id()}"
    return "cpu"


def nbytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def memory_allocated(device: str) -> int:
    """Bytes the framework's allocator holds on a GPU; on the CPU, this process's resident memory."""
    kind, index = parse_spec(device)
    return int(paddle.device.cuda.memory_allocated(index)) if kind == "gpu" else process_rss_bytes()




class Event(_common.Event):
    """Marks a point in a device's queue; ``elapsed_ms`` between two recorded events."""

    @staticmethod
    def _gpu_event() -> Any:
        return paddle.device.cuda.Event(enable_timing=True)












def cuda_version() -> str:
    """The CUDA version the framework was built with ('' for a CPU-only build)."""
    v = paddle.version.cuda()
    return "" if v in (None, "False", "") else str(v)
