"""The sample submissions shipped for assignments 5-8 score what the README says, graded
here without nbgrader (fast); tests/grading/run/test_pipeline.py runs the nbgrader pipeline."""
import linecache

import nbformat
import pytest

from tests.checks.notebooks import ROOT, hidden_checks, namespace

a5, a6 = hidden_checks("a5_dependencies"), hidden_checks("a6_data_parallel")
a7, a8 = hidden_checks("a7_ring_allreduce"), hidden_checks("a8_placements")

SUBMITTED = ROOT / "exercises" / "submitted"


def answers(student: str, assignment: str) -> dict[str, str]:
    nb = nbformat.read(SUBMITTED / student / assignment / f"{assignment}.ipynb", as_version=4)
    out = {}
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("solution"):
            out[meta["grade_id"]] = c.source
            # what ipykernel does for a cell: its source stays findable (a7 sends it to ranks)
            lines = [l + "\n" for l in c.source.splitlines()]
            linecache.cache[meta["grade_id"]] = (len(c.source), None, lines, meta["grade_id"])
    return out


def score(student: str, assignment: str) -> float:
    ns = namespace(assignment, answers(student, assignment))
    if assignment == "a5_dependencies":
        results = a5.check_all(ns["run_dag"])
    elif assignment == "a6_data_parallel":
        results = a6.check_all({k: ns[k] for k in ("scatter", "replicate", "parallel_apply", "gather",
                                                "reduce_gradients")})
    elif assignment == "a7_ring_allreduce":
        fn = ns["ring_all_reduce"]
        fn.__module__ = "__main__"
        results = a7.check_all(fn)
    else:
        results = a8.check_all(ns["link_bytes"], ns["choose_order"])
    return sum(r.points for r in results)


EXPECTED = {
    ("alice", "a5_dependencies"): 10, ("alice", "a6_data_parallel"): 14,
    ("alice", "a7_ring_allreduce"): 6, ("alice", "a8_placements"): 10,
    ("bob", "a5_dependencies"): 7, ("bob", "a6_data_parallel"): 8,
    ("bob", "a7_ring_allreduce"): 2, ("bob", "a8_placements"): 7.5,
    ("carol", "a8_placements"): 6,   # its tampered test cells are put back by nbgrader
}


# a7 starts rank processes
SLOW = {("alice", "a7_ring_allreduce"), ("bob", "a7_ring_allreduce")}


@pytest.mark.parametrize("student, assignment", [
    pytest.param(*key, marks=pytest.mark.slow) if key in SLOW else key for key in EXPECTED])
def test_sample_submissions_score_as_documented(student, assignment):
    assert score(student, assignment) == EXPECTED[(student, assignment)]


def test_carols_broken_samples_are_there_to_be_broken():
    carol = SUBMITTED / "carol"
    assert not (carol / "a5_dependencies").exists()                       # missing
    assert "os._exit" in answers("carol", "a6_data_parallel")["scatter"]  # kills the kernel
    assert "nobody is receiving" in answers("carol", "a7_ring_allreduce")["ring_all_reduce"]
    nb = nbformat.read(carol / "a8_placements" / "a8_placements.ipynb", as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    assert "test_order" not in ids                                        # a deleted test cell
    assert "edited by the student" in nb.cells[ids.index("test_links")].source
