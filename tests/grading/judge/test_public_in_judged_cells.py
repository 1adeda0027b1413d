"""A quick public check never stops its test cell when graded, and each hidden case is
scored on its own (issue 37).

The test cells here are the course's own, read from the source notebooks, run as the judge
runs them (:func:`grader.grading.judge.cells.run_cell_source`, after the notebook's locked
cells): before, ``public(...)`` raised when the quick check failed, the cell ended in an
``AssertionError`` and its hidden points were lost with it."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbgrader.utils import determine_grade

from grader.grading.judge.cells import run_cell_source
from tests.checks.notebooks import hidden_checks, source_notebook

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A12 = "a12_activation_memory"

# a12's answer, right without recomputation, raising in the selective branch only
SELECTIVE_RAISES = '''
def activation_bytes(s, b, h, a, bytes_per_value=2, selective=False):
    if selective:
        raise ValueError("selective recomputation is not done yet")
    w, sbh, scores = bytes_per_value, s * b * h, a * s * s * b
    return sbh * (16 * w + 2) + scores * (2 * w + 1) + 4 * w * s * b
'''


def _judged(assignment: str, cell_id: str, answers: dict[str, str]) -> tuple[str, float | None, BaseException | None]:
    """Run the notebook's locked cells, then ``answers`` (as the kernel would hold them),
    then the test cell ``cell_id`` as the judge does: ``(stdout + stderr, value, error)``,
    stderr marked."""
    hidden_checks(assignment)                       # registers exercises/ for load(...)
    nb = source_notebook(assignment)
    ns: dict = {"__name__": "__judge__"}
    for c in nb.cells:
        m = c.metadata.get("nbgrader", {})
        if c.cell_type == "code" and m.get("locked") and not m.get("grade"):
            assert run_cell_source(c.source, ns)[2] is None
    for source in answers.values():
        exec(compile(source, "<answer>", "exec"), ns)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell_id)
    streams, value, error = run_cell_source(cell.source, ns, f"<{cell_id}>")
    text = "".join(t if name == "stdout" else f"<stderr>{t}</stderr>" for _, name, t in streams)
    return text, value, error


def test_a12_an_error_in_one_branch_costs_only_the_cases_that_call_it():
    """The selective branch raises: the quick check fails (it calls that branch), the cell
    goes on, and the hidden check keeps the 2 points of the cases without recomputation;
    it loses the selective (2) and 32-bit (1) parts, the 32-bit part's selective call
    raising too. Before: 0, the cell ended in the public check's AssertionError."""
    text, value, error = _judged(A12, "test_activation_bytes", {"a": SELECTIVE_RAISES})
    assert error is None, error
    assert value == 2.0, text
    assert "<stderr>" not in text                   # stderr would score the cell 0
    assert "[FAIL] a12 (public)" in text and "selective recomputation is not done yet" in text
    # the feedback names the parts lost and why, and not the part kept
    graded = text[text.index("[FAIL] a12: "):]
    assert "2/5" in graded
    assert "with selective recomputation, 16-bit: activation_bytes raised ValueError" in graded
    assert "32-bit (bytes_per_value=4): activation_bytes raised ValueError" in graded
    assert "without recomputation, 16-bit" not in graded


def test_a12_each_call_is_scored_on_its_own():
    a12 = hidden_checks(A12)
    ns: dict = {}
    exec(SELECTIVE_RAISES, ns)
    r = a12.check_activation_bytes(ns["activation_bytes"])
    assert r.points == 2 and "3 of its 3 calls failed" in r.seen, r.text()

    def only_wide_raises(s, b, h, a, bytes_per_value=2, selective=False):
        if bytes_per_value == 4:
            raise ZeroDivisionError("wide")
        return ns["activation_bytes"](s, b, h, a, bytes_per_value, False) if not selective else \
            s * b * h * (16 * bytes_per_value + 2) + 4 * bytes_per_value * s * b
    r = a12.check_activation_bytes(only_wide_raises)
    assert r.points == 4 and r.message.startswith("32-bit"), r.text()


@pytest.mark.parametrize("answer, points", [("reference", 5.0), ("stub", 0.0)])
def test_a12_the_reference_keeps_full_marks_and_the_stub_scores_zero_without_an_error(answer, points):
    from tests.checks.notebooks import reference

    src = reference(A12)["activation_bytes"] if answer == "reference" else \
        "def activation_bytes(*args, **kwargs):\n    raise NotImplementedError()\n"
    text, value, error = _judged(A12, "test_activation_bytes", {"a": src})
    assert (error, value) == (None, points), text
    assert "<stderr>" not in text


def test_a_quick_check_that_raises_is_told_and_the_hidden_block_still_grades():
    """A public check that crashes on what a student's function returned (not public()
    itself, which never raises) ends only the quick part: the judge says so on stdout and
    runs the hidden block, whose value is the cell's, its lines numbered as in the cell.
    Before (one run of the whole cell), the cell ended in the TypeError, 0 points."""
    from grader.grading.judge.cells import run_test_cell
    from grader.grading.judge.proxies import RemoteTimeout

    def crashes(answer):
        return len(answer)                  # a public check's own bug on a student's value
    ns = {"crashes": crashes, "answer": 7}
    cell = ("# quick feedback\npublic_ok = crashes(answer)\n### BEGIN HIDDEN TESTS\n"
            "print('hidden ran')\n2.5\n### END HIDDEN TESTS\n")
    assert isinstance(run_cell_source(cell, dict(ns), "<t>")[2], TypeError)   # one run: 0
    streams, value, error = run_test_cell(cell, dict(ns), "<t>")
    text = "".join(t for _, name, t in streams if name == "stdout")
    assert (value, error) == (2.5, None), (text, error)
    assert "[FAIL] the quick check above could not run: TypeError" in text and "hidden ran" in text
    assert all(name == "stdout" for _, name, _ in streams)
    _, _, error = run_test_cell(cell.replace("print('hidden ran')", "1 / 0"), dict(ns), "<t>")
    assert isinstance(error, ZeroDivisionError) and error.__traceback__.tb_next.tb_lineno == 4
    # the judge's time limit (not an Exception) or a memory limit ends the cell there
    for stop in (RemoteTimeout("no answer"), MemoryError("the job's bound")):
        streams, value, error = run_test_cell(cell, {"crashes": _raiser(stop), "answer": 7}, "<t>")
        assert error is stop and value is None and "hidden ran" not in str(streams)
    # a cell without a hidden block runs as one (the released notebook's, under validate)
    assert run_test_cell("x = 1\nx + 1", {}, "<t>")[1:] == (2, None)


def _raiser(exc):
    def raise_it(_):
        raise exc
    return raise_it


A10 = "a10_tensor_parallel"


def _released_with(course: Path, assignment: str, student: str, answers: dict[str, str]) -> None:
    """``student``'s submission: the released notebook with ``answers`` (by grade id)."""
    nb = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            c.source = answers[gid]
    (course / "submitted" / student / assignment).mkdir(parents=True)
    nbformat.write(nb, course / "submitted" / student / assignment / f"{assignment}.ipynb")


@pytest.fixture(scope="module")
def graded():
    """One course, graded as an instructor grades it by hand (``nbgrader autograde`` with
    the course's judge, then ``generate_feedback``), one nbgrader run each:

    - a10, f and g left as released (they raise NotImplementedError), tp_mlp right;
    - a12, an answer raising only with ``selective=True``."""
    from grader.grading.judge.executor import JudgedExecute
    from tests.checks.notebooks import reference
    from tests.grading.nbgrader_cli import autograde_options, nbgrader

    course = Path(tempfile.mkdtemp(prefix="judge-public-"))
    try:
        shutil.copy(EXERCISES / "nbgrader_config.py", course)
        shutil.copytree(EXERCISES / "hidden", course / "hidden")
        for a in (A10, A12):
            shutil.copytree(EXERCISES / "source" / a, course / "source" / a)
            made = nbgrader(course, "generate_assignment", a, "--force")
            assert made.returncode == 0, made.stderr[-2000:]
        _released_with(course, A10, "erin", {"tp_mlp": reference(A10)["tp_mlp"]})
        _released_with(course, A12, "erin", {"activation_bytes": SELECTIVE_RAISES.strip()})
        run = nbgrader(course, "autograde", "*", "--force",
                       *autograde_options(JudgedExecute, course / "trace", cell_timeout_s=300))
        feedback = nbgrader(course, "generate_feedback", "*", "--force")
        yield course, run.stderr[-3000:] + feedback.stderr[-2000:]
    finally:
        shutil.rmtree(course, ignore_errors=True)


def _test_cells(course: Path, assignment: str) -> dict:
    nb = nbformat.read(course / "autograded" / "erin" / assignment / f"{assignment}.ipynb",
                       as_version=4)
    return {c.metadata.nbgrader["grade_id"]: c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade")
            and not c.metadata.nbgrader.get("solution")}


def _text(cell) -> str:
    return "".join(o.get("text", "") or f"{o.get('ename')}: {o.get('evalue')}"
                   for o in cell.outputs if o.output_type != "execute_result")


@pytest.mark.slow
def test_a10_task_1_left_as_released_still_earns_task_2s_hidden_points(graded):
    """tp_mlp's quick check (which runs the student's f and g) fails, and its hidden check,
    run with the course's f and g as the notebook promises, gives its 6 points. Before:
    0 + 0, the quick check's AssertionError ending the cell."""
    course, log = graded
    tests = _test_cells(course, A10)
    scores = {k: determine_grade(c)[0] for k, c in tests.items()}
    text = {k: _text(c) for k, c in tests.items()}
    assert scores == {"test_f_g": 0, "test_tp_mlp": 6}, (scores, text, log)
    assert "[FAIL] a10 (public): tp_mlp" in text["test_tp_mlp"], text
    assert not any(o.output_type == "error" or o.get("name") == "stderr"
                   for c in tests.values() for o in c.outputs), text


@pytest.mark.slow
def test_a12_the_feedback_page_names_the_parts_lost(graded):
    """The student's feedback page (what ``generate_feedback`` writes with the course's
    preprocessors) shows 2 of 5 and names the two parts lost with the error, not the part
    kept, and no hidden code. Before: 0 of 5 and only the quick check's AssertionError."""
    import html

    course, log = graded
    cell = _test_cells(course, A12)["test_activation_bytes"]
    assert determine_grade(cell)[0] == 2, (_text(cell), log)
    page = html.unescape((course / "feedback" / "erin" / A12 / f"{A12}.html").read_text())
    graded_text = page[page.index("[FAIL] a12: "):]
    assert "2/5 - with selective recomputation, 16-bit: activation_bytes raised ValueError: " \
           "selective recomputation is not done yet" in graded_text, log
    assert "also: 32-bit (bytes_per_value=4): activation_bytes raised ValueError" in graded_text
    assert "without recomputation, 16-bit" not in graded_text
    assert "check_activation_bytes" not in page and "HIDDEN TESTS" not in page
