"""Through the real grading path (``grade_course``: intake, sandboxed kernel, judge,
feedback): a notebook whose answer cell and test cell were both deleted gets the points of
what is there and a reason naming what was missing (nbgrader alone raised ``KeyError`` in
``OverwriteCells.add_missing_grade_cells`` and scored the whole notebook 0); another
assignment's notebook under this assignment's name is recognised and said so."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.grading.run.pipeline import grade_course

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A9, A8 = "a9_zero_pipeline", "a8_placements"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def graded():
    course = Path(tempfile.mkdtemp(prefix="course-missing-"))
    try:
        shutil.copy(EXERCISES / "nbgrader_config.py", course)
        shutil.copytree(EXERCISES / "hidden", course / "hidden")
        for a in (A9, A8):
            shutil.copytree(EXERCISES / "source" / a, course / "source" / a)
        # dora deleted task 2's answer cell and its test cell
        nb = nbformat.read(EXERCISES / "submitted" / "alice" / A9 / f"{A9}.ipynb", as_version=4)
        nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")
                    not in ("one_f_one_b", "test_schedule")]
        (course / "submitted" / "dora" / A9).mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / "dora" / A9 / f"{A9}.ipynb")
        # finn handed in his a8 notebook as a9
        (course / "submitted" / "finn" / A9).mkdir(parents=True)
        shutil.copy(EXERCISES / "submitted" / "alice" / A8 / f"{A8}.ipynb",
                    course / "submitted" / "finn" / A9 / f"{A9}.ipynb")
        run = grade_course(course, only_assignments=[A9], cell_timeout=30,
                           notebook_timeout=300, memory_gb=2.5, verbose=False)
        yield course, run
    finally:
        shutil.rmtree(course, ignore_errors=True)


def test_deleted_answer_and_test_cells_grade_the_rest_and_name_what_was_missing(graded):
    course, run = graded
    o = run.find("dora", A9)
    assert (o.status, o.score, o.max_score) == ("graded", 5, 10), o.reason
    assert "answer cell one_f_one_b is missing" in o.reason
    assert "test cell test_schedule was deleted" in o.reason
    page = (course / "feedback" / "dora" / A9 / f"{A9}.html").read_text()
    assert "answer cell one_f_one_b is missing" in page


def test_another_assignments_notebook_is_recognised_and_said_so(graded):
    course, run = graded
    o = run.find("finn", A9)
    assert (o.status, o.score) == ("invalid", 0)
    assert f"is the notebook of assignment {A8}, not of {A9}" in o.reason
    page = (course / "feedback" / "finn" / A9 / f"{A9}.html").read_text()
    assert f"assignment {A8}" in page
