"""End to end: nbgrader on a temporary course holding the real assignments, the shipped
sample submissions and the bad submissions a class produces."""
from __future__ import annotations

import csv
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.grading.run.pipeline import grade_course

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
MINE = ["a1_independent_ops", "a2_small_ops", "a3_compute_comm", "a4_profile_trace"]
A1 = "a1_independent_ops"

pytestmark = pytest.mark.slow


def _env() -> dict:
    return dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course}"],
                          cwd=course, env=_env(), capture_output=True, text=True, timeout=600)


def _with_answer(course: Path, student: str, answers: dict[str, str]) -> None:
    """A copy of alice's a1 whose solution cells hold ``answers`` (by grade id)."""
    nb = nbformat.read(EXERCISES / "submitted" / "alice" / A1 / f"{A1}.ipynb", as_version=4)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            c.source = answers[gid]
    out = course / "submitted" / student / A1
    out.mkdir(parents=True)
    nbformat.write(nb, out / f"{A1}.ipynb")


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def course():
    # Not tmp_path_factory: pytest prunes old base temp folders, and other test sessions
    # running at the same time could remove this one mid-run.
    course = Path(tempfile.mkdtemp(prefix="course-"))
    yield from _populate(course)
    shutil.rmtree(course, ignore_errors=True)


def _populate(course: Path):
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    for a in MINE:
        shutil.copytree(EXERCISES / "source" / a, course / "source" / a)
    sub = course / "submitted"
    shutil.copytree(EXERCISES / "submitted" / "carol", sub / "carol")          # broken in 4 ways
    for s in ("alice", "bob"):                                                 # correct, partly
        shutil.copytree(EXERCISES / "submitted" / s / A1, sub / s / A1)
    # dave: time_work allocates without bound, the experiment loops forever
    _with_answer(course, "dave", {
        "time_work": "FRAMEWORK = 'torch'\n\n\ndef time_work(*args, **kwargs):\n    hoard = []\n    while True:\n"
                     "        hoard.append(bytearray(2**28))",
        "experiment": "def independent_ops_experiment(*args, **kwargs):\n    while True:\n        pass"})
    _with_answer(course, "erin", {"time_work": "import ctypes\nctypes.string_at(0)"})  # segfault
    # erin's a2 was cut off while saving: not valid JSON
    shutil.copytree(EXERCISES / "submitted" / "alice" / "a2_small_ops", sub / "erin" / "a2_small_ops")
    damaged = sub / "erin" / "a2_small_ops" / "a2_small_ops.ipynb"
    damaged.write_text(damaged.read_text()[:-400])
    yield course


@pytest.fixture(scope="module")
def graded(course):
    before = _digest(course / "submitted")
    # The per-cell limit leaves room for a slow import on a loaded machine.
    run = grade_course(course, cell_timeout=15, notebook_timeout=300, memory_gb=2.5, verbose=False)
    return run, before


@pytest.fixture(scope="module")
def released(course):
    """The release made once by nbgrader itself, for the tests that read it (each test asks
    for it: none depends on another having run first)."""
    for a in MINE:
        assert nbgrader(course, "generate_assignment", a, "--force").returncode == 0
    return course


def test_generate_then_validate_passes_on_source_and_invert_fails_every_test_on_release(released):
    course = released
    # one nbgrader process per direction; it prints one verdict per notebook
    ok = nbgrader(course, "validate", *[f"source/{a}/{a}.ipynb" for a in MINE])
    assert ok.stdout.count("Success! Your notebook passes all the tests.") == len(MINE), ok.stdout + ok.stderr
    inv = nbgrader(course, "validate", "--invert", *[f"release/{a}/{a}.ipynb" for a in MINE])
    assert inv.stdout.count("Success! The notebook does not pass any tests.") == len(MINE), inv.stdout + inv.stderr


def test_released_notebooks_hold_no_solution_and_no_hidden_test(released):
    course = released
    for a in MINE:
        text = (course / "release" / a / f"{a}.ipynb").read_text()
        src = (course / "source" / a / f"{a}.ipynb").read_text()
        assert "BEGIN SOLUTION" in src and "BEGIN HIDDEN TESTS" in src
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text and "grade(checks" not in text


def test_correct_and_partly_correct_submissions_get_their_scores(graded):
    run, _ = graded
    assert (run.find("alice", A1).score, run.find("alice", A1).max_score) == (8, 8)
    bob = run.find("bob", A1)
    assert bob.status == "graded" and bob.score == 7  # no warm-up: 1 point lost
    # the lost point's reason, in full, in the report (grades.csv's reason was empty)
    assert re.search(r"test cell test_time_work: .* 3/4: a cold GPU was timed", bob.reason), bob.reason
    assert "hint:" in bob.reason, bob.reason
    assert not run.find("alice", A1).reason


def test_feedback_shows_hidden_test_messages_but_not_their_code(graded, course):
    page = (course / "feedback" / "bob" / A1 / f"{A1}.html").read_text()
    assert "a cold GPU was timed" in page and "run fn warmup times, untimed" in page
    assert "check_time_work" not in page and "HIDDEN TESTS" not in page


def test_unbounded_allocation_and_an_endless_loop_fail_their_cells_not_the_run(graded):
    dave = graded[0].find("dave", A1)
    assert dave.status == "graded" and dave.score == 0 and dave.max_score == 8
    # the allocation ends the kernel at the job's memory limit (its control group: there is
    # no address-space limit where a group bounds memory, so no MemoryError is raised first;
    # without memory groups RLIMIT_AS raises MemoryError in the cell); the cell interrupted
    # at the per-cell limit
    assert re.search(r"test_time_work.*the memory limit \(2\.5 GB", dave.reason), dave
    assert "cell test_experiment: the time limit of a cell (15 s) was reached" in dave.reason, dave
    assert dave.cells == {"test_time_work": (0.0, 4.0), "test_experiment": (0.0, 4.0)}, dave


def test_a_cell_that_ends_the_kernel_is_not_run_and_the_rest_is_graded(graded, course):
    run, _ = graded
    # carol's time_work calls os._exit, so both test cells that call it end the kernel
    carol = run.find("carol", A1)
    assert (carol.score, carol.status) == (0, "graded"), carol
    assert carol.killed == ["cell 5 (grade id 'test_time_work')", "cell 8 (grade id 'test_experiment')"]
    # erin's time_work cell is a segmentation fault; her experiment needs time_work
    erin = run.find("erin", A1)
    assert (erin.score, erin.status, erin.killed) == (0, "graded", ["cell 4 (grade id 'time_work')"])
    for o in (carol, erin):
        assert "ended the Python kernel" in o.reason
        assert "ended the Python kernel" in (course / "feedback" / o.student / A1 / f"{A1}.html").read_text()


def test_invalid_and_missing_notebooks_get_a_recorded_zero_with_the_reason(graded):
    run, _ = graded
    cut = run.find("erin", "a2_small_ops")
    assert (cut.score, cut.status) == (0, "invalid") and "not valid JSON" in cut.reason
    bad = run.find("carol", "a2_small_ops")        # JSON, but not a notebook
    assert (bad.score, bad.status) == (0, "invalid") and "not a valid notebook" in bad.reason
    gone = run.find("carol", "a3_compute_comm")
    assert (gone.score, gone.status) == (0, "missing") and "does not exist" in gone.reason


def test_deleted_and_edited_test_cells_are_restored_and_run(graded):
    o = graded[0].find("carol", "a4_profile_trace")
    assert o.status == "graded" and o.score == 8   # her answers are right; the tests are the originals
    assert "test_trace was deleted" in o.reason and "test_chrome was edited" in o.reason


def test_every_grade_is_recorded_and_exported_and_no_submission_is_changed(graded, course):
    run, before = graded
    assert _digest(course / "submitted") == before
    students = ["alice", "bob", "carol", "dave", "erin"]
    rows = list(csv.DictReader(open(course / "reports" / "grades.csv")))
    assert {(r["student"], r["assignment"]) for r in rows} == {(s, a) for s in students for a in MINE}
    exported = list(csv.DictReader(open(course / "reports" / "nbgrader_grades.csv")))
    scores = {(r["student_id"], r["assignment"]): float(r["score"]) for r in exported}
    assert scores[("alice", A1)] == 8 and scores[("bob", A1)] == 7 and scores[("carol", A1)] == 0
