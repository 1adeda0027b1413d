"""What chapters and students import: ``from grader.lab import get_devices, Benchmark, ...``."""
from __future__ import annotations

import datetime
import inspect
import logging
import platform
import sys

from .core.backends import FRAMEWORKS, get_backend
from .core.bench import Benchmark, Stats, measure
from .core.devices import (Device, DevicePlan, close_workers, cpu_cores, get_devices, load_line,
                      paddle_cpu_wheel, plan_devices, standin_devices, torch_cpu_wheel)
from .core.launch import RankFailed, RankTimeout, launch
from .core.timeline import Interval, Timeline

# Paddle puts an INFO handler on the root logger; matplotlib's font-cache notices would
# then land in chapter outputs. They say nothing about the experiments.
logging.getLogger("matplotlib").setLevel(logging.WARNING)

__all__ = [
    "FRAMEWORKS", "get_backend", "Benchmark", "Stats", "measure", "Device", "DevicePlan",
    "get_devices", "standin_devices", "plan_devices", "close_workers", "cpu_cores", "load_line",
    "launch",
    "RankFailed", "RankTimeout", "Interval", "Timeline", "hardware_summary", "hardware_note",
    "show_source",
    "cpu_model",
]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_summary(page: str | None = None) -> str:
    """One line saying where this page's outputs were computed; with ``page`` (a chapter's
    name), also which of its GPU cells replay a recorded GPU run, from which machine."""
    lines = [f"Outputs on this page were computed while building it ({datetime.date.today().isoformat()}):",
             f"  CPU: {cpu_cores()} cores, {cpu_model()}"]
    for fw in FRAMEWORKS:
        if fw == "paddle" and (cpu_wheel := paddle_cpu_wheel()):
            lines.append(f"  PaddlePaddle {cpu_wheel}: no GPU")
            continue
        if fw == "torch" and (cpu_wheel := torch_cpu_wheel()):
            lines.append(f"  PyTorch {cpu_wheel}: no GPU")
            continue
        try:
            be = get_backend(fw)
        except ImportError:  # a GPU machine may carry one framework only
            lines.append(f"  {'PyTorch' if fw == 'torch' else 'PaddlePaddle'}: not installed")
            continue
        n = be.gpu_count()
        gpus = f"{n} GPU(s), {be.gpu_name(0)}" if n else "no GPU"
        lines.append(f"  {be.LABEL} {be.version()}: {gpus}")
    if page:
        from .core.gpucells import GpuCellError, records_summary

        try:
            lines += records_summary(page)
        except (GpuCellError, OSError):  # a copy of the page without the course's chapters
            pass
    return "\n".join(lines)


def hardware_note(page: str | None = None) -> None:
    """:func:`hardware_summary` as the note under a chapter's title: wrapped prose with
    one item per line, not a printed line that scrolls sideways."""
    from .core.notes import note

    first, *rest = hardware_summary(page).splitlines()
    note([line.strip() for line in rest], title=first.rstrip(":"))
    paddle_exits_quietly()


def paddle_exits_quietly(shell=None) -> None:
    """Paddle's C++ signal handlers print a "FatalError: Termination signal" block when the
    process gets SIGTERM, which is how Jupyter ends a kernel that does not exit in time:
    in a book build it landed in the build's log. Once a cell of this kernel has imported
    paddle, its handlers are switched off (``paddle.disable_signal_handler``): SIGTERM
    then ends the kernel as it ends any process. Outside IPython, nothing to do."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return
        shell = get_ipython()
    if shell is None:
        return

    def after_cell(result=None) -> None:
        paddle = sys.modules.get("paddle")
        if paddle is not None and hasattr(paddle, "disable_signal_handler"):
            paddle.disable_signal_handler()
            shell.events.unregister("post_run_cell", after_cell)

    shell.events.register("post_run_cell", after_cell)


def show_source(obj: object) -> None:
    """Print the source of a course function (workloads live in modules so that worker
    processes can import them; this shows the reader exactly what runs)."""
    print(inspect.getsource(obj).rstrip())
