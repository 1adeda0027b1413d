"""What a thread does before it runs framework code: Paddle's graph mode is per thread.

Paddle keeps the dynamic-graph ("eager") tracer in thread-local state
(``paddle.base.framework.global_var``). ``import paddle`` turns dynamic mode on in the
importing thread; a thread started later copies a module-level default, which is that
tracer only while the importing thread is alive: when the importing thread ends, its
``disable_static`` guard is unwound and the default goes back to ``None``. So after paddle
is first imported in a short-lived thread (a test cell judged in its own thread), every
thread started afterwards, and the main thread too, runs in *static* mode:
``paddle.to_tensor`` builds a graph variable, ``Tensor.numpy()`` raises "only can be called
by paddle.Tensor in dynamic graph mode", ``paddle.concat`` rejects eager tensors. PyTorch has
no such state.

:func:`framework_ready` switches the calling thread to dynamic mode if Paddle is imported
and the thread is not in it; it never imports Paddle. Call it first in every thread the
course starts that may run framework code (the judge's test-cell threads and the threads
answering the other side's calls, :mod:`grader.grading.judge.executor` and
:mod:`grader.grading.judge.channel`), or give it to a pool as
``ThreadPoolExecutor(initializer=framework_ready)``. Never call it in a student's kernel's
main thread: a notebook may choose static mode there (``paddle.enable_static()``).
"""
from __future__ import annotations

import sys
from typing import Any, Callable

__all__ = ["framework_ready", "ready_thread_target"]


def framework_ready() -> None:
    """Put this thread in Paddle's dynamic-graph mode if Paddle is imported (see above)."""
    paddle = sys.modules.get("paddle")
    spec = getattr(paddle, "__spec__", None)
    if paddle is None or getattr(spec, "_initializing", False):
        return   # not imported, or another thread is importing it right now
    in_dynamic, enable = (getattr(paddle, "in_dynamic_mode", None),
                          getattr(paddle, "disable_static", None))
    if in_dynamic is not None and enable is not None and not in_dynamic():
        enable()


def ready_thread_target(target: Callable[..., Any]) -> Callable[..., Any]:
    """``target`` wrapped to call :func:`framework_ready` first (for ``threading.Thread``)."""
    def run(*args: Any, **kwargs: Any) -> Any:
        framework_ready()
        return target(*args, **kwargs)

    run.__name__ = getattr(target, "__name__", "run")
    return run
