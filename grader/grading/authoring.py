"""Write nbgrader notebooks from Python: the cells and the metadata nbgrader expects.

Instructors may edit ``exercises/source/*/*.ipynb`` in Jupyter with nbgrader's "Create
Assignment" toolbar instead; this module writes the same metadata, and the sample
submissions and tests use it to fill in students' answers (see exercises/AUTHORING.md).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat

__all__ = ["markdown", "code", "solution", "tests", "notebook", "write", "fill_solutions",
           "solution_ids", "test_ids"]

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def _meta(grade_id: str, *, solution: bool = False, grade: bool = False, locked: bool = False,
          points: float | None = None) -> dict[str, Any]:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def markdown(grade_id: str, text: str) -> nbformat.NotebookNode:
    """Instructions; locked, so a student's edits are replaced when grading."""
    return nbformat.v4.new_markdown_cell(text.strip("\n"), metadata=_meta(grade_id, locked=True))


def code(grade_id: str, source: str) -> nbformat.NotebookNode:
    """Read-only code (imports, given helpers)."""
    return nbformat.v4.new_code_cell(source.strip("\n"), metadata=_meta(grade_id, locked=True))


def free(source: str) -> nbformat.NotebookNode:
    """An ordinary cell students may change (their own experiments); not graded."""
    return nbformat.v4.new_code_cell(source.strip("\n"))


def solution(grade_id: str, source: str) -> nbformat.NotebookNode:
    """Where students write code; ``### BEGIN SOLUTION`` / ``### END SOLUTION`` mark what
    the released version replaces with ``raise NotImplementedError()``."""
    return nbformat.v4.new_code_cell(source.strip("\n"), metadata=_meta(grade_id, solution=True))


def tests(grade_id: str, source: str, points: float) -> nbformat.NotebookNode:
    """An autograded test cell (locked). Its last expression may be a number: nbgrader then
    gives that many points (partial credit); an error gives zero."""
    return nbformat.v4.new_code_cell(source.strip("\n"), metadata=_meta(
        grade_id, grade=True, locked=True, points=points))


def notebook(cells: list[nbformat.NotebookNode]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.metadata["language_info"] = {"name": "python"}
    for i, c in enumerate(nb.cells):
        c["id"] = c.metadata.get("nbgrader", {}).get("grade_id", f"cell-{i}")
    return nb


def write(nb: nbformat.NotebookNode, path: str | Path) -> Path:
    """Write without outputs (the repository never holds outputs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    nbformat.validate(nb)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return path


def _ids(nb: nbformat.NotebookNode, key: str) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get(key)]


def solution_ids(nb: nbformat.NotebookNode) -> list[str]:
    return _ids(nb, "solution")


def test_ids(nb: nbformat.NotebookNode) -> list[str]:
    return _ids(nb, "grade")


def fill_solutions(released: nbformat.NotebookNode, answers: dict[str, str]) -> nbformat.NotebookNode:
    """A student's submission: the released notebook with solution cells replaced by
    ``answers[grade_id]`` (cells not named keep the stub)."""
    nb = nbformat.from_dict(json.loads(json.dumps(released)))
    unknown = set(answers) - set(solution_ids(nb))
    if unknown:
        raise KeyError(f"no solution cells {sorted(unknown)} in this notebook")
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers and c.metadata["nbgrader"].get("solution"):
            c.source = answers[gid].strip("\n")
    return nb
