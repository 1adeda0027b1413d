"""A small course of one assignment graded through the real pipeline, for the tests that
grade rank assignments end to end (test_a10_graded.py, test_a11_graded.py): the sandbox
needed (skipped without it, failed when ``CI`` is set), the course made from the
repository's source, hidden checks and committed samples, and a graded test cell's output."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.grading.config import SandboxConfig
from grader.grading.sandbox import setup

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"


def need_sandbox() -> None:
    problem = setup.check(SandboxConfig())
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)


def make(assignment: str, samples: tuple[str, ...], extra: dict[str, nbformat.NotebookNode]) -> Path:
    """A course of ``assignment`` with the committed ``samples`` and ``extra`` notebooks
    (student -> notebook), in a new temporary folder."""
    course = Path(tempfile.mkdtemp(prefix=f"{assignment.split('_')[0]}-course-"))
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    shutil.copytree(EXERCISES / "source" / assignment, course / "source" / assignment)
    for student in samples:
        shutil.copytree(EXERCISES / "submitted" / student / assignment,
                        course / "submitted" / student / assignment)
    for student, nb in extra.items():
        (course / "submitted" / student / assignment).mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / student / assignment / f"{assignment}.ipynb")
    return course


def sample(student: str, assignment: str, answers: dict[str, str]) -> nbformat.NotebookNode:
    """A committed sample notebook with the answer cells ``answers`` (grade id -> source)."""
    nb = nbformat.read(EXERCISES / "submitted" / student / assignment / f"{assignment}.ipynb",
                       as_version=4)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            c.source = answers[gid]
    return nb


def outputs(course: Path, assignment: str, student: str, cell: str) -> str:
    """What the graded test cell ``cell`` printed (its text and error values)."""
    nb = nbformat.read(course / "autograded" / student / assignment / f"{assignment}.ipynb",
                       as_version=4)
    c = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell)
    return "\n".join(o.get("text", "") or str(o.get("evalue", "")) for o in c.get("outputs", []))
