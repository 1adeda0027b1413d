"""A cell that ends the kernel costs only that cell.

When a student's code ends the Python kernel (``os._exit``, a segmentation fault, a kill of
its own process), nbclient raises ``DeadKernelError`` and nbgrader drops the whole notebook.
The pipeline (:mod:`grader.grading.pipeline`) therefore autogrades with
:class:`GuardedExecute` in place of nbgrader's ``Execute``. It is the same preprocessor, in
the same place (after nbgrader has restored the released test cells) and under the same
limits, with two additions, both set on the nbgrader command line by the pipeline:

- ``trace_file``: before sending each cell to the kernel, *this* process (nbgrader's, not the
  kernel) writes the cell's index and name there. When the kernel dies, the last index written is
  the cell that was running. Nothing the student's code prints is read.
- ``skip_cells``: the indices of cells that ended the kernel in an earlier attempt. Their
  source is replaced by a ``raise RuntimeError(...)`` saying so, in the copy nbgrader
  executes (the submitted file is never changed). A test cell replaced this way fails and
  scores 0; a solution cell replaced this way leaves its names undefined, so the tests that
  need them fail and the independent ones still score.

:func:`autograde_args` and :func:`dead_cell` are the pipeline's side of it; the pipeline
retries a bounded number of times (:data:`MAX_ROUNDS`) and then records the whole-notebook
zero. A cell is named by its position (1-based) and, where it has one, its grade id.
"""
from __future__ import annotations

import os
from pathlib import Path

from nbgrader.preprocessors import Execute
from traitlets import Unicode

__all__ = ["GuardedExecute", "KILLED", "MAX_ROUNDS", "autograde_args", "chain", "dead_cell",
           "describe", "replacement"]

# Attempts in all: the first, then one more for each cell found ending the kernel
# (COURSE_CRASH_ROUNDS changes it for a grading run; the tests use it).
MAX_ROUNDS = int(os.environ.get("COURSE_CRASH_ROUNDS", "4"))



KILLED = "ended the Python kernel during grading"


def replacement(label: str) -> str:
    """The source that runs instead of a cell that ended the kernel."""
    msg = f"{label} {KILLED} (os._exit, a crash or a kill); it was not run"
    return f"raise RuntimeError({msg!r})\n"


class GuardedExecute(Execute):
    """nbgrader's ``Execute``, recording the running cell and not running known killers."""

    trace_file = Unicode("", help="file that receives the index of the cell being run").tag(config=True)
    # Comma-separated: the class is not known to nbgrader's command-line parser, so a list
    # option would arrive as strings.
    skip_cells = Unicode("", help="indices of cells replaced by a raise, e.g. '3,6'").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        for i in (int(i) for i in self.skip_cells.split(",") if i.strip()):
            if 0 <= i < len(nb.cells) and nb.cells[i].cell_type == "code":
                nb.cells[i].source = replacement(describe(i, nb.cells[i].metadata))
        return super().preprocess(nb, resources, km)

    def on_cell_execute(self, **kwargs):  # nbclient hook, before the cell is sent
        if self.trace_file:
            i = kwargs["cell_index"]
            Path(self.trace_file).write_text(f"{i}\t{describe(i, kwargs['cell'].metadata)}")


def describe(index: int, metadata: dict) -> str:
    gid = metadata.get("nbgrader", {}).get("grade_id")
    return f"cell {index + 1}" + (f" (grade id {gid!r})" if gid else "")


def chain(executor: type) -> list[type]:
    """nbgrader's own list of autograde preprocessors with ``executor`` in place of
    ``Execute`` (everything else as nbgrader has it)."""
    from nbgrader.converters import Autograde

    out = [executor if p is Execute else p
           for p in Autograde.class_traits()["autograde_preprocessors"].default()]
    assert executor in out, "nbgrader's Autograde no longer runs Execute"
    return out


def autograde_args(trace_file: Path, skip: list[tuple[int, str]]) -> list[str]:
    """nbgrader command-line options putting :class:`GuardedExecute` in place of ``Execute``
    in nbgrader's own list of autograde preprocessors; ``skip``: ``(index, label)`` of the
    cells not to run."""
    names = [f"{p.__module__}.{p.__qualname__}" for p in chain(GuardedExecute)]
    args = [f"--Autograde.autograde_preprocessors={names!r}",
            f"--GuardedExecute.trace_file={trace_file}"]
    if skip:
        args.append("--GuardedExecute.skip_cells=" + ",".join(str(i) for i, _ in skip))
    return args


def dead_cell(trace_file: Path) -> tuple[int, str] | None:
    """``(index, label)`` of the cell that was running when the kernel died (``None``: no
    cell had started, or the trace is unreadable)."""
    try:
        index, label = trace_file.read_text().split("\t", 1)
        return int(index), label.strip()
    except (OSError, ValueError):
        return None
