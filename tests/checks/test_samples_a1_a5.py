"""The sample submissions shipped for assignments 1-5 score what the README says, graded here
without nbgrader (fast); tests/grading/run/test_pipeline.py and test_judge.py run them through
nbgrader and the judge."""
import json

import nbformat
import pytest

from tests.checks.notebooks import ROOT, hidden_checks, namespace

SUBMITTED = ROOT / "exercises" / "submitted"
CHECKS = {
    "a1_independent_ops": [("check_time_work", "time_work"),
                           ("check_experiment", "independent_ops_experiment")],
    "a2_small_ops": [("check_time_on_streams", "time_on_streams"), ("check_speedups", "stream_speedups")],
    "a3_compute_comm": [("check_sequential", "sequential"), ("check_overlapped", "overlapped")],
    "a4_profile_trace": [("check_trace_with_events", "trace_with_events"),
                         ("check_chrome_overlap", "overlap_from_chrome_trace")],
    "a5_dependencies": [("check_all", "run_dag")],
}


def answers(student: str, assignment: str) -> dict[str, str]:
    nb = nbformat.read(SUBMITTED / student / assignment / f"{assignment}.ipynb", as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def results(student: str, assignment: str) -> list:
    ns = namespace(assignment, answers(student, assignment))
    module, out = hidden_checks(assignment), []
    for check, fn in CHECKS[assignment]:
        r = getattr(module, check)(ns[fn], ns["FRAMEWORK"])
        out += r if isinstance(r, list) else [r]
    return out


EXPECTED = {   # (score, words in the first failing check's message or hint)
    ("alice", "a1_independent_ops"): (8, None), ("alice", "a2_small_ops"): (8, None),
    ("alice", "a3_compute_comm"): (8, None), ("alice", "a4_profile_trace"): (8, None),
    ("alice", "a5_dependencies"): (10, None),
    ("bob", "a1_independent_ops"): (7, "timed cold"),
    ("bob", "a2_small_ops"): (4, "ran on 1 stream(s), not 4"),
    ("bob", "a3_compute_comm"): (5, "queued on the products' stream"),  # no overlap: 3 of 5
    ("bob", "a4_profile_trace"): (7, "recorded on the products' stream"),
    ("bob", "a5_dependencies"): (7, "the host waited"),
    ("carol", "a4_profile_trace"): (8, None),   # right answers; nbgrader puts her tests back
}


@pytest.mark.parametrize("student, assignment", list(EXPECTED))
def test_sample_submissions_score_as_documented(student, assignment):
    got = results(student, assignment)
    score, words = EXPECTED[student, assignment]
    assert sum(r.points for r in got) == score, "\n".join(r.text() for r in got)
    if words:
        first = next(r for r in got if not r.passed)
        assert words in f"{first.message}\n{first.hint}", first.text()


def test_alice_answers_in_both_frameworks():
    frameworks = {a: namespace(a, answers("alice", a))["FRAMEWORK"] for a in CHECKS}
    assert set(frameworks.values()) == {"torch", "paddle"}, frameworks


def test_carols_broken_samples_are_there_to_be_broken():
    carol = SUBMITTED / "carol"
    assert "os._exit" in answers("carol", "a1_independent_ops")["time_work"]    # kills the kernel
    raw = json.loads((carol / "a2_small_ops" / "a2_small_ops.ipynb").read_text())
    assert "cells" in raw and "metadata" not in raw                              # not a notebook
    assert not (carol / "a3_compute_comm").exists() and not (carol / "a5_dependencies").exists()
    nb = nbformat.read(carol / "a4_profile_trace" / "a4_profile_trace.ipynb", as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    assert "test_trace" not in ids                                               # deleted
    assert "edited by the student" in nb.cells[ids.index("test_chrome")].source  # edited
