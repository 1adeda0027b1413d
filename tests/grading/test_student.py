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
    assert info["title"].startswith("Assignment 1") and "asynchronous execution" in info["goes_with"]
    assert info["points"] == 8


def test_the_goes_with_line_may_span_lines_and_end_mid_line(tmp_path):
    import nbformat
    from nbformat.v4 import new_markdown_cell, new_notebook

    from grader.grading.student import assignment_info

    nb = new_notebook(cells=[new_markdown_cell(
        "# Assignment 9: title\n\n*Goes with the chapter on X (the seed's exercise 9:\n"
        "\"do a thing\").* Then the task text, with *emphasis* in it.\n")])
    path = tmp_path / "a9_x.ipynb"
    nbformat.write(nb, path)
    info = assignment_info(path)
    assert info["title"] == "Assignment 9: title"
    assert info["goes_with"] == "Goes with the chapter on X (the seed's exercise 9: \"do a thing\")."
