"""A one-notebook nbgrader assignment, built in memory.

The hub serves the course's own assignments (``exercises/source``); this tiny one is what
it offers when that directory has none yet, and what the launcher's tests grade (it takes
seconds, where a course assignment may import torch and paddle).
"""
from __future__ import annotations

from pathlib import Path

import nbformat

ASSIGNMENT = "hub_warmup"
NOTEBOOK = "squares.ipynb"


def _cell(kind: str, source: str, **nbgrader) -> nbformat.NotebookNode:
    make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
    cell = make(source)
    if nbgrader:
        meta = {"grade": False, "solution": False, "locked": False, "task": False,
                "schema_version": 3}
        meta.update(nbgrader)
        cell.metadata["nbgrader"] = meta
    return cell


def notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (course)",
                                 "language": "python"}
    nb.cells = [
        _cell("markdown", "# Warm-up: the hub works\n\nImplement `squares(n)`, run the "
              "check, then submit from the Assignments tab."),
        _cell("code", 'def squares(n):\n    """[0, 1, 4, ..., (n-1)**2] as a list."""\n'
              "    ### BEGIN SOLUTION\n    return [i * i for i in range(n)]\n"
              "    ### END SOLUTION", solution=True, grade_id="squares"),
        _cell("code", "assert squares(4) == [0, 1, 4, 9]\nassert squares(0) == []",
              grade=True, locked=True, points=2, grade_id="check_squares"),
    ]
    return nb


def write_course(root: Path) -> Path:
    """Write ``source/<ASSIGNMENT>/<NOTEBOOK>`` under ``root``; return the notebook's path."""
    path = Path(root) / "source" / ASSIGNMENT / NOTEBOOK
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook(), path)
    return path
