"""A cell that ends the kernel (os._exit, a segfault) costs that cell, not the assignment."""
from __future__ import annotations

import csv
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.grading.sandbox import crashes
from grader.grading.run.pipeline import grade_course

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A1 = "a1_independent_ops"
EXIT = "import os\nos._exit(1)"
SEGV = "import ctypes\nctypes.string_at(0)"
KILL = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"


def test_the_replacement_cell_raises_and_names_the_cell():
    label = crashes.describe(6, {"nbgrader": {"grade_id": "experiment"}})
    assert label == "cell 7 (grade id 'experiment')"
    with pytest.raises(RuntimeError, match=r"cell 7 \(grade id 'experiment'\) ended the Python kernel"):
        exec(crashes.replacement(label), {})


def test_the_dead_cell_is_read_from_the_trace_and_an_empty_trace_names_none(tmp_path):
    trace = tmp_path / "trace"
    assert crashes.dead_cell(trace) is None
    trace.write_text("")
    assert crashes.dead_cell(trace) is None
    trace.write_text("6\tcell 7 (grade id 'experiment')")
    assert crashes.dead_cell(trace) == (6, "cell 7 (grade id 'experiment')")
    assert crashes.dead_cause(trace) is None
    trace.write_text("6\tcell 7 (grade id 'experiment')\tfiles-limit")   # ended by the executor
    assert crashes.dead_cell(trace) == (6, "cell 7 (grade id 'experiment')")
    assert crashes.dead_cause(trace) == "files-limit"


def _with_answer(course: Path, student: str, answers: dict[str, str]) -> None:
    nb = nbformat.read(EXERCISES / "submitted" / "alice" / A1 / f"{A1}.ipynb", as_version=4)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") in answers:
            c.source = answers[c.metadata["nbgrader"]["grade_id"]]
    out = course / "submitted" / student / A1
    out.mkdir(parents=True)
    nbformat.write(nb, out / f"{A1}.ipynb")


@pytest.fixture(scope="module")
def graded():
    course = Path(tempfile.mkdtemp(prefix="crash-course-"))
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    shutil.copytree(EXERCISES / "source" / A1, course / "source" / A1)
    shutil.copytree(EXERCISES / "submitted" / "alice" / A1, course / "submitted" / "alice" / A1)
    # The experiment cell ends the kernel; time_work (task 1) does not depend on it.
    _with_answer(course, "frank", {"experiment": EXIT})
    _with_answer(course, "gina", {"experiment": SEGV})
    _with_answer(course, "hank", {"time_work": KILL, "experiment": SEGV})  # every solution cell
    before = {p: p.read_bytes() for p in (course / "submitted").rglob("*.ipynb")}
    run = grade_course(course, cell_timeout=15, notebook_timeout=300, memory_gb=2.5, verbose=False)
    yield course, run, before
    shutil.rmtree(course, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("student", ["frank", "gina"])   # os._exit, a segmentation fault
def test_a_cell_that_ends_the_kernel_loses_only_what_depends_on_it(graded, student):
    course, run, before = graded
    o = run.find(student, A1)
    assert o.status == "graded" and 0 < o.score < o.max_score, o
    assert o.cells == {"test_time_work": (4.0, 4.0), "test_experiment": (0.0, 4.0)}, o
    assert o.killed == ["cell 7 (grade id 'experiment')"], o
    assert "cell 7 (grade id 'experiment') ended the Python kernel" in o.reason, o
    page = (course / "feedback" / student / A1 / f"{A1}.html").read_text()
    assert "cell 7 (grade id &#x27;experiment&#x27;) ended the Python kernel" in page
    rows = {r["student"]: r for r in csv.DictReader(open(course / "reports" / "grades.csv"))}
    assert (float(rows[student]["score"]), rows[student]["status"]) == (o.score, "graded")


@pytest.mark.slow
def test_a_notebook_whose_every_answer_ends_the_kernel_scores_zero_naming_each_cell(graded):
    course, run, _ = graded
    o = run.find("hank", A1)
    assert (o.status, o.score, o.max_score) == ("graded", 0, 8), o
    assert o.killed == ["cell 4 (grade id 'time_work')", "cell 7 (grade id 'experiment')"], o


@pytest.mark.slow
def test_other_students_are_unaffected_and_every_grade_and_submission_is_kept(graded):
    course, run, before = graded
    assert (run.find("alice", A1).score, run.find("alice", A1).killed) == (8, [])
    assert {p: p.read_bytes() for p in (course / "submitted").rglob("*.ipynb")} == before
    exported = list(csv.DictReader(open(course / "reports" / "nbgrader_grades.csv")))
    assert sorted(r["student_id"] for r in exported) == ["alice", "frank", "gina", "hank"]
    scores = {r["student_id"]: float(r["score"]) for r in exported}
    assert scores == {"alice": 8, "frank": 4, "gina": 4, "hank": 0}


@pytest.mark.slow
def test_after_the_last_attempt_the_whole_notebook_scores_zero_with_the_reason(monkeypatch):
    # hank has two cells that end the kernel; the grading workers read the number of rounds
    monkeypatch.setenv("COURSE_CRASH_ROUNDS", "2")
    course = Path(tempfile.mkdtemp(prefix="crash-course-"))
    try:
        shutil.copy(EXERCISES / "nbgrader_config.py", course)
        shutil.copytree(EXERCISES / "hidden", course / "hidden")
        shutil.copytree(EXERCISES / "source" / A1, course / "source" / A1)
        _with_answer(course, "hank", {"time_work": EXIT, "experiment": SEGV})
        run = grade_course(course, cell_timeout=15, notebook_timeout=300, memory_gb=2.5, verbose=False)
        o = run.find("hank", A1)
        assert (o.status, o.score, o.max_score) == ("crashed", 0, 8), o
        assert "kernel died" in o.reason and "without cell 4 (grade id 'time_work')" in o.reason, o
        assert "kernel died" in (course / "feedback" / "hank" / A1 / f"{A1}.html").read_text()
    finally:
        shutil.rmtree(course, ignore_errors=True)


def test_the_guarded_executor_takes_the_place_of_nbgraders_and_outputs_are_bounded():
    from nbgrader.converters import Autograde

    from grader.grading.config import Limits
    from grader.grading.sandbox.outputs import BoundOutputs

    c = crashes.autograde_config(Limits(cell_timeout_s=9, output_mb=2.0, kernel_files=7),
                                 trace_file=Path("/t/cell"), skip=[(3, "a"), (6, "b")])
    chain = c.Autograde.autograde_preprocessors
    default = Autograde.class_traits()["autograde_preprocessors"].default()
    # the executor, then the outputs cut to the notebook's budget, then nbgrader's own steps
    assert chain[:2] == [crashes.GuardedExecute, BoundOutputs] and chain[2:] == default[1:]
    guarded = crashes.GuardedExecute(config=c)     # the limits reach the executor itself
    assert (guarded.timeout, guarded.trace_file, guarded.skip_cells) == (9, "/t/cell", "3,6")
    assert (guarded.output_bytes, guarded.folder_files) == (2 * 2**20, 7)
    assert BoundOutputs(config=c).output_bytes == 2 * 2**20


@pytest.mark.slow
def test_a_kernel_the_machines_out_of_memory_killer_ended_is_a_grading_fault_not_a_zero(
        tmp_path, monkeypatch):
    import os
    import sys

    from grader.grading.config import load
    from grader.grading.run.item import GradingFault, api, grade_one
    from grader.grading.sandbox.setup import MACHINE_OOM

    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    shutil.copytree(EXERCISES / "source" / A1, course / "source" / A1)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    _with_answer(course, "frank", {"experiment": KILL})
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    assert api(course).generate_assignment(A1, force=True)["success"]   # (runs alembic)
    with pytest.raises(GradingFault, match="machine ran out of memory"):
        grade_one(load(course), "frank", A1, kernel_end=lambda: MACHINE_OOM)
    assert not (course / "feedback" / "frank").exists()   # nothing recorded or released
