"""Feedback never quotes a hidden test's code, even when the test raised."""
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

import time

import pytest

from grader.grading.submission.feedback import ClearHiddenTestsSafely, StripTestTracebacks, in_child

ROOT = Path(__file__).resolve().parents[3]
HIDDEN = "grade(checks.check_secret(answer))"


def _notebook():
    test = new_code_cell(f"public(answer)\n### BEGIN HIDDEN TESTS\n{HIDDEN}\n### END HIDDEN TESTS",
                         metadata={"nbgrader": {"grade": True, "solution": False, "grade_id": "t1",
                                                "points": 2}})
    test.outputs = [
        new_output("stream", name="stdout", text="[FAIL] check_secret: expected 3, saw 4\n"),
        new_output("error", ename="AssertionError", evalue="expected 3, saw 4",
                   traceback=["----", f"Cell In[4], line 3\n----> 3 {HIDDEN}", "AssertionError: ..."]),
    ]
    student = new_code_cell("answer = 4", metadata={"nbgrader": {"solution": True, "grade": False,
                                                                 "grade_id": "s1"}})
    student.outputs = [new_output("error", ename="NameError", evalue="x",
                                  traceback=["Cell In[3], line 1\n----> 1 answer = x"])]
    return new_notebook(cells=[student, test])


def test_a_test_cells_traceback_is_cut_to_the_error_line():
    nb, _ = StripTestTracebacks().preprocess(_notebook(), {})
    text = nbformat.writes(nb)
    assert HIDDEN not in "".join(nb.cells[1].outputs[1]["traceback"])
    assert nb.cells[1].outputs[1]["traceback"] == ["AssertionError: expected 3, saw 4"]
    assert "[FAIL] check_secret" in text          # the check's message stays


def test_the_students_own_traceback_is_kept():
    nb, _ = StripTestTracebacks().preprocess(_notebook(), {})
    assert "answer = x" in nb.cells[0].outputs[0]["traceback"][0]


def test_the_course_config_runs_it_after_clear_hidden_tests():
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT / "exercises")).load_config()
    names = [p.__name__ for p in cfg.GenerateFeedback.preprocessors]
    assert names.index("ClearHiddenTestsSafely") < names.index("StripTestTracebacks")


def test_a_students_unpaired_hidden_tests_marker_does_not_stop_the_feedback():
    nb = _notebook()
    nb.cells[0].source = "answer = 4\n# ### BEGIN HIDDEN TESTS\n"
    nb, _ = ClearHiddenTestsSafely(enforce_metadata=False).preprocess(nb, {})
    assert nb.cells[0].source == "answer = 4\n# ### BEGIN HIDDEN TESTS\n"   # left as it is
    assert HIDDEN not in nb.cells[1].source                                # the test's hidden


def test_a_feedback_page_that_never_ends_is_stopped():
    t0 = time.monotonic()
    assert in_child(lambda: time.sleep(60) or {}, timeout=1.0) is None
    assert time.monotonic() - t0 < 30
    assert in_child(lambda: {"success": True, "log": "x" * 200_000}, timeout=30) == \
        {"success": True, "log": "x" * 50_000, "error": ""}


@pytest.mark.parametrize("fn", [lambda: 1 / 0, lambda: __import__("os")._exit(3)])
def test_a_feedback_page_that_fails_is_none(fn):
    assert in_child(fn, timeout=30) is None


def _course_feedback_app(tmp_path):
    import shutil

    from grader.grading.run.item import api
    from grader.grading.submission.feedback import OneStudentFeedback

    for name in ("nbgrader_config.py", "course.toml"):
        shutil.copy(ROOT / "exercises" / name, tmp_path)
    return OneStudentFeedback(api(tmp_path))


def _page_of(exporter, nb):
    resources = {"nbgrader": {"notebook": "student", "score": 1, "max_score": 2, "late_penalty": 0}}
    import re

    page = exporter.from_notebook_node(nb, resources)[0]
    return re.sub(r"nonce[-=\"]+[A-Za-z0-9_-]+", "nonce-N", page)   # one per page (the CSP's)


def test_the_feedback_exporter_is_warmed_and_a_page_is_the_same_as_without(tmp_path):
    """The worker's exporter renders a small notebook before its first page (so that its
    children do not load the lexer, the included templates and the sanitizer each time);
    the student's page is the one a fresh exporter writes (byte for byte, but for the
    page's own CSP nonce), and holds nothing of the warm-up notebook."""
    from grader.grading.submission.feedback import warm_exporter

    fb = _course_feedback_app(tmp_path)
    assert fb.warm is True               # a warm-up that failed would only cost time: say so
    nb = _notebook()
    nb.cells[1].metadata["nbgrader"]["score"] = 0
    warmed = fb.app.exporter_class(parent=fb.app, config=fb.app.config)
    assert warm_exporter(warmed) is True
    cold = fb.app.exporter_class(parent=fb.app, config=fb.app.config)
    page = _page_of(warmed, nb)
    assert page == _page_of(cold, nb)
    assert "[FAIL] check_secret" in page
    assert "Warm-up" not in page and "warm_test" not in page and "math.sqrt" not in page
