"""Does ``nn.DataParallel``'s step on two devices beat one? Measured on the stand-in.

:func:`compare` times three ways of training on the same batch: the data-parallel step
of :mod:`grader.lab.data_parallel.phases` on all the given devices, the same step on the first
device only (the same machinery, no second device), and a plain step in this process
with one thread (each CPU worker also has one). Each is warmed up and repeated; the
result holds the :class:`~grader.lab.core.bench.Stats` of each, so a chapter prints the median
and the spread and derives the speed-ups from them.
"""
from __future__ import annotations

from typing import Any, Sequence

from grader.lab.core.backends import get_backend
from grader.lab.core.bench import Stats, measure
from .phases import DataParallelTrainer
from .problem import Problem, _tensor, build_model, single_step

__all__ = ["compare"]


def compare(devices: Sequence[Any], problem: Problem, repeats: int = 5) -> dict[str, Stats]:
    """Step times of the data-parallel step on ``devices``, on ``devices[0]`` alone, and of
    a plain one-thread step here (on GPU 0 when there is one)."""
    framework = devices[0].framework
    be = get_backend(framework)
    two = DataParallelTrainer(devices, problem)
    one = DataParallelTrainer(devices[:1], problem)
    times = {
        f"{len(devices)} devices": measure(lambda: two.step(problem.x, problem.y),
                                           f"{len(devices)} devices", repeats=repeats),
        "1 device": measure(lambda: one.step(problem.x, problem.y), "1 device",
                            repeats=repeats),
    }
    where = "gpu:0" if be.gpu_count() else "cpu"
    model = build_model(framework, problem.weights, where)
    x, y = _tensor(framework, problem.x, where), _tensor(framework, problem.y, where)
    threads = be.get_num_threads()
    be.set_num_threads(1)
    try:
        times["plain step"] = measure(
            lambda: single_step(framework, model, x, y, problem.lr), "plain step",
            sync=lambda: be.synchronize(None), repeats=repeats)
    finally:
        be.set_num_threads(threads)
    return times
