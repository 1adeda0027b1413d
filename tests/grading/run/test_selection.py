"""``make grade --assignment NAME`` / ``--student NAME``: a name that is not in the course is
an error that lists the names there are (it had printed "nothing to grade" and exited 0, as
if that work were graded already)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.grading.__main__ import main
from grader.grading.run.pipeline import grade_course


ROOT = Path(__file__).resolve().parents[3]


def _course(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "exercises" / "nbgrader_config.py", tmp_path)
    for a in ("a1_independent_ops", "a2_small_ops"):
        (tmp_path / "source" / a).mkdir(parents=True)
        (tmp_path / "source" / a / f"{a}.ipynb").write_text("{}")
    for s in ("alice", "bob"):
        (tmp_path / "submitted" / s).mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize("args, says", [
    (["--assignment", "a1_indepndent_ops"],
     "no assignment 'a1_indepndent_ops' in {course}/source/: the assignments there are "
     "'a1_independent_ops', 'a2_small_ops'"),
    (["--student", "alcie", "--student", "bob"],
     "no student 'alcie' in {course}/submitted/: the students there are 'alice', 'bob'"),
    (["--student", "carol", "--assignment", "a1_independent_ops", "--assignment", "a7"],
     "no assignment 'a7' in"),
])
def test_a_name_that_is_not_in_the_course_exits_non_zero_naming_the_known_ones(tmp_path, capsys,
                                                                              args, says):
    course = _course(tmp_path)
    assert main(["--course", str(course), "--sandbox", "none", *args]) == 1
    err = capsys.readouterr().err
    assert says.format(course=course.resolve()) in err, err
    assert "nothing to grade" not in err and "Traceback" not in err
    assert not (course / "reports").exists()      # stopped before anything was set up


def test_grade_course_refuses_an_unknown_student_of_a_course_without_submissions(tmp_path):
    course = _course(tmp_path)
    for s in ("alice", "bob"):
        (course / "submitted" / s).rmdir()
    with pytest.raises(ValueError, match=r"no student 'ann' in .*submitted/: it holds no student yet"):
        grade_course(course, only_students=["ann"], sandbox="none", verbose=False)
