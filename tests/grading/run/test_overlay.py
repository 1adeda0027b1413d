"""Grading for credit (issue 37): a private overlay replaces the public answer key, and a
verdict is current (every input of it in the cache key).

One tiny course, graded for real (``grade_course``: sandbox, judge, feedback) a few times:

1. with an overlay whose variant asks for cubes where the public notebook asks for squares:
   the public solution loses the points, the variant's solution scores full, and a kernel
   cannot see the overlay (its folder, its hidden check, its secret);
2. after the overlay's hidden check changed: every verdict is graded again, and the run
   says that the hidden checks changed;
3. after a limit changed, grading one student only: the report is refused, naming the
   verdicts made under the other limit.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.grading import authoring as au
from grader.grading.run import inputs
from grader.grading.run.pipeline import grade_course

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A = "a1_sums"
LIMITS = "[limits]\ncell_timeout_s = 30\nnotebook_timeout_s = 240\nmemory_gb = 2.5\n"

pytestmark = pytest.mark.slow

HIDDEN = '''
from grader.checks.result import CheckResult
from grader.checks.support import call
from grader.grading.hidden import cases

P = {power}


def check(fn):
    ns = [3, 5, cases("{a}", "n").randint(6, 40)]   # the last drawn from the course secret
    ok = all(call(fn, n) == sum(i ** P for i in range(1, n + 1)) for n in ns)
    return CheckResult("power_sum", 2.0 if ok else 0.0, 2.0, "{ok}" if ok else "wrong sums")
'''

SNOOP = '''
import os
for path in {paths!r}:
    try:
        os.stat(path)
        print("SEEN", path)
    except OSError as e:
        print("NOT SEEN", path, type(e).__name__)
'''


def _notebook(power: int, word: str, snoop: str = "") -> nbformat.NotebookNode:
    return au.notebook([
        au.markdown("task", f"Write `power_sum(n)`: the sum of the {word} of 1..n."),
        au.code("imports", "from grader.checks.support import grade, public"),
        au.solution("answer", snoop + "def power_sum(n):\n    ### BEGIN SOLUTION\n"
                    f"    return sum(i ** {power} for i in range(1, n + 1))\n    ### END SOLUTION"),
        au.tests("test_power_sum", "### BEGIN HIDDEN TESTS\nfrom grader.grading.hidden import "
                 f'load\ngrade(load("{A}").check(power_sum))\n### END HIDDEN TESTS', 2),
    ])


def _submit(course: Path, student: str, nb: nbformat.NotebookNode) -> None:
    au.write(nb, course / "submitted" / student / A / f"{A}.ipynb")


@pytest.fixture(scope="module")
def runs():
    """The three gradings of the module docstring: (course, overlay, run1, run2, refusal).
    The grader's own digest is held fixed: a change of the grader package (another commit
    while the runs go on) would regrade too (tests/grading/test_overlay.py tests it)."""
    course = Path(tempfile.mkdtemp(prefix="overlay-course-"))
    private = Path(tempfile.mkdtemp(prefix="overlay-private-"))      # mode 0700
    mp = pytest.MonkeyPatch()
    mp.setattr(inputs, "grader_digest", lambda: "the grader of these runs")
    try:
        shutil.copy(EXERCISES / "nbgrader_config.py", course)
        (course / "course.toml").write_text(LIMITS + f'\n[overlay]\nfolder = "{private}"\n')
        (course / "hidden").mkdir()
        shutil.copy(EXERCISES / "hidden" / "__init__.py", course / "hidden")
        # the public course: squares, its solution and its hidden check
        au.write(_notebook(2, "squares"), course / "source" / A / f"{A}.ipynb")
        (course / "hidden" / f"{A}.py").write_text(HIDDEN.format(power=2, a=A, ok="right"))
        # the private variant: cubes, and a secret that draws the third case
        au.write(_notebook(3, "cubes"), private / "source" / A / f"{A}.ipynb")
        (private / "hidden").mkdir()
        (private / "hidden" / f"{A}.py").write_text(HIDDEN.format(power=3, a=A, ok="right"))
        (private / "secret").write_bytes(os.urandom(32))
        paths = [str(private), str(private / "hidden" / f"{A}.py"), str(private / "secret"),
                 str(course / "hidden")]
        _submit(course, "pub", _notebook(2, "squares"))          # the public solution
        _submit(course, "var", _notebook(3, "cubes"))            # the variant's solution
        _submit(course, "snoop", _notebook(3, "cubes", SNOOP.format(paths=paths)))
        first = grade_course(course, workers=2, verbose=False)
        # the instructor changes the overlay's hidden check (its message) and grades again
        (private / "hidden" / f"{A}.py").write_text(HIDDEN.format(power=3, a=A, ok="all right"))
        second = grade_course(course, workers=2, verbose=False)
        # a limit changes, and only one student is graded: the report would be mixed
        (course / "reports" / "grades.csv").unlink()
        with pytest.raises(RuntimeError) as refused:
            grade_course(course, only_students=["pub"], cell_timeout=31, workers=1, verbose=False)
        yield course, private, first, second, str(refused.value)
    finally:
        mp.undo()
        shutil.rmtree(course, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


def test_the_overlay_replaces_the_public_answer_key(runs):
    course, private, first, *_ = runs
    scores = {o.student: (o.score, o.max_score, o.status) for o in first.outcomes}
    assert scores["var"] == (2.0, 2.0, "graded"), first.table()
    assert scores["pub"] == (0.0, 2.0, "graded"), first.table()     # squares, where cubes are asked
    # what was released is the variant, without its solution or its hidden test
    released = (course / "release" / A / f"{A}.ipynb").read_text()
    assert "cubes" in released and "squares" not in released
    assert "i ** 3" not in released and "HIDDEN" not in released


def test_a_kernel_cannot_see_the_overlay(runs):
    course, private, first, *_ = runs
    assert first.find("snoop", A).score == 2.0, first.table()
    nb = nbformat.read(course / "autograded" / "snoop" / A / f"{A}.ipynb", as_version=4)
    out = "".join(o.get("text", "") for c in nb.cells if c.metadata.get("nbgrader", {}).get(
        "grade_id") == "answer" for o in c.outputs)
    assert out.count("NOT SEEN") == 4 and "\nSEEN" not in "\n" + out, out
    assert str(private / "secret") in out


def test_a_changed_hidden_check_regrades_every_verdict_and_says_so(runs):
    course, private, first, second, _ = runs
    assert second.graded_now == {(s, A) for s in ("pub", "snoop", "var")}
    assert second.notes == [f"{A}: 3 verdicts are out of date (the hidden checks changed): "
                            "graded again"], second.notes
    rows = json.loads((course / "reports" / "grades.json").read_text())
    assert {r["student"]: r["score"] for r in rows} == {"pub": 0.0, "snoop": 2.0, "var": 2.0}
    fb = (course / "feedback" / "var" / A / f"{A}.html").read_text()
    assert "all right" in fb


def test_a_report_mixing_verdicts_of_other_limits_is_refused_with_the_reason(runs):
    course, *_, refused = runs
    assert "the reports were not written" in refused
    assert f"{A}: 2 verdicts out of date, the limits (course.toml or the command line) changed" \
        in refused, refused
    assert not (course / "reports" / "grades.csv").exists()
