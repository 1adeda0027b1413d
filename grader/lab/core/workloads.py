"""Workloads the chapters run on devices. They live in a module (not in notebook cells) so
CPU worker processes can import them; chapters show their source with
:func:`grader.lab.show_source`. Each is written once for both frameworks: ``x @ x`` is the
same matrix product in PyTorch and Paddle.
"""
from __future__ import annotations

from typing import Any


def matmul_chain(x: Any, n: int) -> list[Any]:
    """The seed's ``run``: ``n`` independent products ``x @ x``; keeps every result."""
    return [x @ x for _ in range(n)]


def matmul_last(x: Any, n: int) -> Any:
    """``n`` independent products ``x @ x``, keeping only the last result.

    The seed keeps all 50 results of 4000 x 4000 float32: 50 * 64 MB = 3.2 GB per device.
    The products are independent, so keeping one result runs the same kernels while holding
    two matrices instead of fifty-one.
    """
    y = None
    for _ in range(n):
        y = x @ x
    return y


def spin(seconds: float) -> float:
    """Busy-wait on the host for ``seconds`` (a stand-in for work of known length)."""
    import time

    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return seconds
