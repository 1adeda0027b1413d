"""The student version the book links: no solutions, no hidden tests, no outputs; public
checks and the tasks stay."""
from pathlib import Path

import nbformat
import pytest

from grader.grading.student import assignment_info, student_version

SOURCE = Path(__file__).resolve().parents[2] / "exercises" / "source"
MINE = ["a1_independent_ops", "a2_small_ops", "a3_compute_comm", "a4_profile_trace"]


@pytest.mark.parametrize("name", MINE)
def test_the_student_version_has_stubs_and_public_checks_but_no_solution_or_hidden_test(name):
    src = nbformat.read(SOURCE / name / f"{name}.ipynb", as_version=4)
    text = nbformat.writes(student_version(src))
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text and "grade(checks." not in text
    assert "raise NotImplementedError()" in text and "public(checks." in text
    assert "BEGIN SOLUTION" in nbformat.writes(src), "the source itself is untouched"


def test_assignment_info_reads_title_chapter_and_points():
    info = assignment_info(SOURCE / "a1_independent_ops" / "a1_independent_ops.ipynb")
    assert info["title"].startswith("Assignment 1") and "Asynchronous" in info["goes_with"]
    assert info["points"] == 8
