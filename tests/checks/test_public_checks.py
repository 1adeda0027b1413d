"""Public checks: they catch what the notebook itself shows (its worked examples, orders of
magnitude) without failing the cell for it (the hidden tests then give the points the
mistake leaves), print no points, and still fail an unimplemented answer."""
import pytest

from grader.checks import a1_independent_ops as p1, a8_placements as p8, a9_zero_pipeline as p9
from grader.checks.support import public
from tests.checks import a1_solutions, a9_solutions
from tests.checks.notebooks import namespace


def _shown(res, capsys) -> str:
    public(res)                       # advisory: printed, not raised
    return capsys.readouterr().out


def test_a8_catches_the_worked_example_and_prints_no_points(capsys):
    res = p8.public_link_bytes(lambda *a, **k: {(0, 1): 16, (1, 0): 16})
    assert not res.passed and res.advisory and "{(0, 1): 64, (1, 0): 64}" in res.expected
    out = _shown(res, capsys)
    assert out.startswith("[FAIL]") and "0/1" not in out and "no points" in out
    ok = p8.public_link_bytes(namespace("a8_placements", {})["link_bytes"])
    assert ok.passed and "1/1" not in _shown(ok, capsys)


def test_a9_catches_a_schedule_that_is_not_the_notebooks_example(capsys):
    res = p9.public_one_f_one_b(a9_solutions.schedule_gpipe)
    assert not res.passed and res.advisory and "one_f_one_b(2, 3)" in res.expected
    assert p9.public_one_f_one_b(a9_solutions.schedule_greedy).passed
    res = p9.public_zero_bytes(a9_solutions.zero_stage1_splits_grads)
    assert not res.passed and res.advisory and "zero_bytes(1000, 4, 1)" in res.expected


def test_a1_catches_a_time_far_from_the_operations():
    ns = namespace("a1_independent_ops", a1_solutions.WRONG["no_synchronize"][0])
    res = p1.public_time_work(ns["time_work"], ns["FRAMEWORK"])
    assert not res.passed and res.advisory and "before the GPU had finished" in res.hint


def test_an_unimplemented_answer_still_fails_the_cell():
    def stub(*args, **kwargs):
        raise NotImplementedError()
    with pytest.raises(AssertionError, match="not implemented"):
        public(p9.public_one_f_one_b(stub))
