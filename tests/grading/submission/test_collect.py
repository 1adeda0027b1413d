"""A hand-in from outside the hub, the instructor's way: the zips ``python -m grader.handin``
makes go through nbgrader's real ``zip_collect`` (with the course's nbgrader_config.py) into
``submitted/``, and ``make grade``'s pipeline grades what it collected."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.grading.run.pipeline import grade_course
from grader.grading.student import student_version
from grader.handin import handin
from grader.student_setup import with_setup_cell, wheel_name
from tests.grading.nbgrader_cli import nbgrader

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A1, A2 = "a1_independent_ops", "a2_small_ops"

pytestmark = pytest.mark.slow


def _downloaded(student_nb: Path, folder: Path, name: str) -> Path:
    """A sample submission as a notebook downloaded from the book (its set-up cell first)."""
    nb = with_setup_cell(nbformat.read(student_nb, as_version=4), wheel_name(ROOT))
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)
    return folder / name


@pytest.fixture(scope="module")
def collected():
    course = Path(tempfile.mkdtemp(prefix="course-handin-"))
    try:
        shutil.copy(EXERCISES / "nbgrader_config.py", course)
        shutil.copytree(EXERCISES / "hidden", course / "hidden")
        for a in (A1, A2):
            shutil.copytree(EXERCISES / "source" / a, course / "source" / a)
        # the released notebook, which `zip_collect --strict` compares names with (what
        # `nbgrader generate_assignment` writes there; grade_course generates it itself)
        (course / "release" / A1).mkdir(parents=True)
        nbformat.write(student_version(nbformat.read(course / "source" / A1 / f"{A1}.ipynb",
                                                     as_version=4)),
                       course / "release" / A1 / f"{A1}.ipynb")
        laptop = course.parent / (course.name + "-laptop")
        # ann hands in a1 twice: first bob's partly wrong answer, then alice's correct one
        early = _downloaded(EXERCISES / "submitted" / "bob" / A1 / f"{A1}.ipynb", laptop, f"{A1}.ipynb")
        first = handin(A1, "ann.lee", notebook=early, now=1_796_000_000)
        later = _downloaded(EXERCISES / "submitted" / "alice" / A1 / f"{A1}.ipynb", laptop, f"{A1}.ipynb")
        env = {k: v for k, v in os.environ.items() if k != "NBGRADER_EXECUTION"}
        cli = subprocess.run([sys.executable, "-m", "grader.handin", A1, "--student", "ann.lee"],
                             cwd=laptop, capture_output=True, text=True, timeout=120,
                             env=dict(env, PYTHONPATH=str(ROOT)))
        assert cli.returncode == 0, cli.stderr
        second = next(p for p in laptop.glob(f"{A1}-ann.lee-*.zip") if p != first.zip_path)
        # and her a2 notebook, dropped into a1's folder by mistake
        a2 = _downloaded(EXERCISES / "submitted" / "alice" / A2 / f"{A2}.ipynb", laptop, f"{A2}.ipynb")
        wrong = handin(A2, "ann.lee", notebook=a2)
        archive = course / "downloaded" / A1 / "archive"
        archive.mkdir(parents=True)
        shutil.copy(first.zip_path, archive)
        # a learning platform renames what it hands back; the path inside the zip still says it all
        shutil.copy(second, archive / f"Ann Lee_4711_assignsubmission_file_{second.name}")
        shutil.copy(wrong.zip_path, archive)
        collect = nbgrader(course, "zip_collect", A1, "--strict")
        yield course, collect, later, cli.stdout
    finally:
        shutil.rmtree(course, ignore_errors=True)
        shutil.rmtree(course.parent / (course.name + "-laptop"), ignore_errors=True)


def test_zip_collect_puts_the_newest_hand_in_into_submitted(collected):
    course, collect, later, said = collected
    assert collect.returncode == 0, collect.stderr[-3000:]
    assert said.startswith(f"handed in {A1}.ipynb") and "all 2 answer cells are filled in" in said
    got = course / "submitted" / "ann.lee" / A1
    assert sorted(p.name for p in got.iterdir()) == [f"{A1}.ipynb", "timestamp.txt"]
    assert (got / f"{A1}.ipynb").read_bytes() == later.read_bytes()     # the newer one
    assert "Skipped submission file with older timestamp" in collect.stderr   # (sorted first)
    # the a2 notebook was skipped, saying why; nothing else was collected
    assert f"handed in for assignment '{A2}', not '{A1}'" in collect.stderr
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["ann.lee"]


def test_make_grade_grades_what_zip_collect_collected(collected):
    course, collect, _, _ = collected
    assert collect.returncode == 0, collect.stderr[-3000:]
    run = grade_course(course, only_assignments=[A1], cell_timeout=60, notebook_timeout=600,
                       verbose=False)
    o = run.find("ann.lee", A1)
    assert (o.status, o.score, o.max_score) == ("graded", 8, 8), o.reason
    assert (course / "feedback" / "ann.lee" / A1 / f"{A1}.html").is_file()
