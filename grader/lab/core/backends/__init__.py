"""Backend adapters: the only modules that touch ``torch.cuda`` or ``paddle.device.cuda``.

Both adapters expose the same public names with the same signatures and return types
(``tests/lab/core/backends/test_parity.py`` says so), so code written against one runs
against the other. Device specs are plain strings everywhere: ``"cpu"`` or ``"gpu:N"``.
"""
from __future__ import annotations

import importlib
from types import ModuleType

FRAMEWORKS = ("torch", "paddle")

# What each adapter must define; the parity test checks names and signatures.
API = (
    "NAME", "LABEL", "version", "gpu_count", "gpu_name", "native_device", "synchronize",
    "set_num_threads", "get_num_threads", "randn", "zeros", "from_numpy", "to_numpy", "matmul",
    "tensor_device", "nbytes", "memory_allocated", "manual_seed", "Event", "cuda_version",
)


def get_backend(framework: str) -> ModuleType:
    """Return the adapter module for ``"torch"`` or ``"paddle"``."""
    if framework not in FRAMEWORKS:
        raise ValueError(
            f"unknown framework {framework!r}: choose one of {', '.join(FRAMEWORKS)}"
        )
    return importlib.import_module(f"grader.lab.core.backends.{framework}_backend")
