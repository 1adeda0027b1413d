"""A notebook keeps at most ``output_mb`` of output, counted in bytes, with a note where cut.

A cell that prints 300 MB made a 524 MB autograded notebook, as large a feedback page and a
grading worker of 2.4 GB: nbgrader's ``LimitOutput`` counts lines, and one line can be any
size. :class:`Budget` is spent as the kernel's messages arrive (the executor,
:class:`~grader.grading.sandbox.crashes.GuardedExecute`, asks it before keeping each output, so the
worker never holds more) and once more over the finished notebook (:class:`BoundOutputs`,
after the executor in the autograde chain: the judge writes test cells' outputs itself).

What decides a score is never dropped: an ``error`` output and an ``execute_result`` are
kept (their text cut), and a cell that wrote to ``stderr`` keeps a ``stderr`` output
(nbgrader gives such a test cell 0). Other outputs past the budget are cut (streams) or
left out (displays), and the cell gets one ``stdout`` line saying so (:data:`CUT`).
"""
from __future__ import annotations

import json

from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
from traitlets import Int

__all__ = ["Budget", "BoundOutputs", "CUT", "size_of"]

CUT = "[grading: output cut here"
KEEP_TEXT = 2000   # characters kept of an error's message or a result that is over the budget


def size_of(value) -> int:
    """Bytes ``value`` takes as JSON (what it adds to the notebook file)."""
    return len(json.dumps(value, default=str, ensure_ascii=False).encode("utf-8", "replace"))


def note(limit: int) -> str:
    return (f"\n{CUT}: a notebook keeps at most {limit / 2**20:g} MB of output; the rest "
            "of this cell's output was not kept]\n")


def _cut_text(text, keep: int):
    if isinstance(text, list):
        text = "".join(map(str, text))
    text = str(text)
    return text if len(text) <= keep else text[:max(0, keep)] + "…"


class Budget:
    """``limit`` bytes of output for one notebook, spent output by output."""

    def __init__(self, limit: int) -> None:
        self.limit, self.left = int(limit), int(limit)
        self.cut_cells: set = set()

    def content(self, msg_type: str, content: dict, cell) -> dict | None:
        """``content`` of a kernel message that adds output, as much as is kept (possibly cut),
        or None to leave it out. ``cell``: a key of the cell, to note it once."""
        need = size_of(content)
        if need <= self.left:
            self.left -= need
            return content
        content = dict(content)
        if msg_type == "stream":
            keep = max(0, self.left - 200)
            if keep == 0 and content.get("name") != "stderr":
                self.cut_cells.add(cell)
                return None
            content["text"] = _cut_text(content.get("text", ""), max(keep, 1))
        elif msg_type == "error":
            content = self.error(content)
        elif msg_type == "execute_result":
            content["data"] = {"text/plain": _cut_text(
                content.get("data", {}).get("text/plain", ""), KEEP_TEXT)}
            content["metadata"] = {}
        else:
            self.cut_cells.add(cell)
            return None
        self.cut_cells.add(cell)
        self.left = 0           # once something is cut, only what decides a score is kept
        return content

    @staticmethod
    def error(content: dict) -> dict:
        content = dict(content)
        content["ename"] = _cut_text(content.get("ename", "Error"), 200)
        content["evalue"] = _cut_text(content.get("evalue", ""), KEEP_TEXT)
        tb = [str(x) for x in content.get("traceback", []) or []]
        content["traceback"] = [_cut_text("\n".join(tb), 4 * KEEP_TEXT)] if tb else []
        return content

    def outputs(self, outputs: list, cell) -> list:
        """A finished cell's ``outputs`` within what is left (see the module docstring)."""
        kept = []
        for out in outputs:
            kind = out.get("output_type")
            fields = {k: v for k, v in out.items() if k != "output_type"}
            got = self.content(kind, fields, cell)
            if got is fields:
                kept.append(out)
            elif got is not None:
                kept.append(new_output(kind, **got) if kind != "stream" else
                            new_output("stream", name=got.get("name", "stdout"),
                                       text=got.get("text", "")))
        if cell in self.cut_cells and not any(CUT in str(o.get("text", "")) for o in kept):
            kept.append(new_output("stream", name="stdout", text=note(self.limit)))
        return kept


class BoundOutputs(Preprocessor):
    """Cuts a finished notebook's outputs to ``output_bytes`` in all (see the module
    docstring). In the autograde chain right after the executor."""

    output_bytes = Int(4 * 2**20, help="bytes of output a notebook keeps, in all").tag(config=True)

    def preprocess(self, nb, resources):
        budget = Budget(self.output_bytes)
        for i, cell in enumerate(nb.cells):
            if cell.get("cell_type") == "code" and cell.get("outputs"):
                cell.outputs = budget.outputs(cell.outputs, i)
        return nb, resources
