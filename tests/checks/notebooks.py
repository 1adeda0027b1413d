"""Read the instructor notebooks and run students' answers outside nbgrader (fast), the
way a notebook would: the notebook's read-only code cells, then the answers in order."""
from __future__ import annotations

import linecache
from pathlib import Path

import nbformat

from grader.grading import hidden as _hidden

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "exercises" / "source"


def hidden_checks(assignment: str):
    """The instructor's hidden checks of ``assignment`` (``exercises/hidden/<assignment>.py``),
    loaded the way a hidden test cell loads them."""
    _hidden.use(ROOT / "exercises")
    return _hidden.load(assignment)


def source_notebook(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(SOURCE / assignment / f"{assignment}.ipynb", as_version=4)


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def reference(assignment: str) -> dict[str, str]:
    """The instructor's solution cells, by grade id."""
    return {_meta(c)["grade_id"]: c.source for c in source_notebook(assignment).cells
            if _meta(c).get("solution")}


def namespace(assignment: str, answers: dict[str, str]) -> dict:
    """Globals of a notebook whose solution cells hold ``answers`` (missing ones: the
    reference); test and free cells are not run."""
    ns: dict = {"__name__": f"submission_{assignment}"}
    ref = reference(assignment)
    for c in source_notebook(assignment).cells:
        m = _meta(c)
        if c.cell_type != "code" or m.get("grade"):
            continue
        if m.get("solution"):
            _run(answers.get(m["grade_id"], ref[m["grade_id"]]), m["grade_id"], ns)
        elif m.get("locked"):
            _run(c.source, m["grade_id"], ns)
    return ns


def _run(source: str, name: str, ns: dict) -> None:
    # as IPython does for a cell: its lines stay findable, so errors name the student's line
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    exec(compile(source, name, "exec"), ns)


def run_checks(module, assignment: str, checks: list[tuple[str, str]], answers: dict[str, str]):
    """Results of ``module.<check>(ns[<function>])`` for each ``(check, function)``; with
    the notebook's ``FRAMEWORK`` as well where the notebook has one (assignments 1-5)."""
    ns = namespace(assignment, answers)
    extra = (ns["FRAMEWORK"],) if "FRAMEWORK" in ns else ()
    return [getattr(module, check)(ns[fn], *extra) for check, fn in checks]

