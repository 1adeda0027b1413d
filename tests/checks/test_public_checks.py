"""Public checks: they catch what the notebook itself shows (its worked examples, orders of
magnitude) without failing the cell for it (the hidden tests then give the points the
mistake leaves), print no points, and never raise: an unimplemented answer's message goes to
stderr in a kernel, which fails the cell under ``nbgrader validate`` and stops nothing, and
to stdout when the judge grades the cell, whose hidden checks then give the points."""
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


def _validated(outputs) -> float:
    """What nbgrader's validate and autograde score a 1-point test cell with ``outputs``."""
    from nbformat.v4 import new_code_cell, new_output
    from nbgrader.utils import determine_grade

    cell = new_code_cell("public(...)", metadata={"nbgrader": {
        "grade": True, "solution": False, "grade_id": "t", "points": 1}})
    cell.outputs = [new_output("stream", name=n, text=t) for n, t in outputs]
    return determine_grade(cell)[0]


def test_an_unimplemented_answer_fails_the_cell_under_validate_without_stopping_it(capsys):
    """In a kernel (the student's, validate's) the message goes to stderr: no traceback, Run
    All goes on, and nbgrader counts the cell failed (``validate --invert`` needs that of the
    released stubs). Before, public() raised an AssertionError: a traceback, Run All stopped."""
    def stub(*args, **kwargs):
        raise NotImplementedError()
    res = p9.public_one_f_one_b(stub)
    public(res)                                             # does not raise
    seen = capsys.readouterr()
    assert seen.out == "" and "not implemented" in seen.err and "Traceback" not in seen.err
    assert "no points" in seen.err
    assert _validated([("stderr", seen.err)]) == 0
    # graded, in the judge: stdout only, so the cell's points are its hidden checks'
    from grader.checks.support import judging
    with judging():
        public(res)
    seen = capsys.readouterr()
    assert seen.err == "" and "not implemented" in seen.out
    assert _validated([("stdout", seen.out)]) == 1
    # an advisory finding fails nothing, in a kernel either
    public(p8.public_link_bytes(lambda *a, **k: {(0, 1): 16, (1, 0): 16}))
    assert capsys.readouterr().err == ""


from grader.checks import (a2_small_ops as p2, a3_compute_comm as p3,  # noqa: E402
                           a4_profile_trace as p4, a5_dependencies as p5)
from tests.checks import (a2_solutions, a3_solutions, a4_solutions,  # noqa: E402
                          a5_solutions)

PUBLIC = {   # assignment: (public module, solutions, [(public check, function)])
    "a1_independent_ops": (p1, a1_solutions, [("public_time_work", "time_work"),
                                              ("public_experiment", "independent_ops_experiment")]),
    "a2_small_ops": (p2, a2_solutions, [("public_time_on_streams", "time_on_streams"),
                                        ("public_speedups", "stream_speedups")]),
    "a3_compute_comm": (p3, a3_solutions, [("public_sequential", "sequential"),
                                           ("public_overlapped", "overlapped")]),
    "a4_profile_trace": (p4, a4_solutions, [("public_trace_with_events", "trace_with_events"),
                                            ("public_chrome", "overlap_from_chrome_trace")]),
    "a5_dependencies": (p5, a5_solutions, [("public_run_dag", "run_dag")]),
}
# typical mistakes the notebook's own numbers show: (assignment, mistake, public check)
CAUGHT = [("a2_small_ops", "waits_for_one_stream_only", "public_time_on_streams"),
          ("a3_compute_comm", "read_before_copies_landed", "public_overlapped"),
          ("a3_compute_comm", "clock_read_before_done", "public_sequential"),
          ("a4_profile_trace", "milliseconds", "public_trace_with_events"),
          ("a4_profile_trace", "microseconds_as_seconds", "public_chrome"),
          ("a5_dependencies", "swapped_product", "public_run_dag")]


def _public_results(assignment, answers):
    module, _, checks = PUBLIC[assignment]
    ns = namespace(assignment, answers)
    fw = ns.get("FRAMEWORK", "torch")
    return {check: getattr(module, check)(ns[fn], fw) for check, fn in checks}


@pytest.mark.parametrize("assignment, name", [(a, n) for a, (_, sol, _) in PUBLIC.items()
                                              for n in ["reference", *sorted(sol.CORRECT)]])
def test_every_correct_answer_passes_every_public_check(assignment, name):
    answers = {} if name == "reference" else PUBLIC[assignment][1].CORRECT[name]
    results = _public_results(assignment, answers)
    assert all(r.passed for r in results.values()), [r.text() for r in results.values()]


@pytest.mark.parametrize("assignment, mistake, check", CAUGHT)
def test_a_mistake_the_notebooks_numbers_show_is_caught_publicly_without_failing_the_cell(
        assignment, mistake, check):
    r = _public_results(assignment, PUBLIC[assignment][1].WRONG[mistake][0])[check]
    assert not r.passed and r.advisory, r.text()


from grader.checks import a6_data_parallel as p6  # noqa: E402
from tests.checks import a6_solutions  # noqa: E402

A6 = {"scatter": p6.public_scatter, "replicate": p6.public_replicate,
      "parallel_apply": lambda fn, fw: p6.public_parallel_apply(fn), "gather": p6.public_gather,
      "reduce_gradients": p6.public_reduce_gradients}


@pytest.mark.parametrize("name", ["scatter", "replicate", "parallel_apply", "gather", "reduce_gradients",
                                  "scatter_by_hand", "parallel_apply_pool", "gather_concat",
                                  "reduce_sum_then_divide", "scatter_paddle_split",
                                  "gather_paddle_concat", "reduce_paddle_stacked"])
def test_a6_correct_pieces_pass_their_public_checks(name):
    piece = next(k for k in A6 if name.startswith(k.split("_")[0]))
    fw = "paddle" if "paddle" in name else "torch"
    assert A6[piece](getattr(a6_solutions, name), fw).passed


@pytest.mark.parametrize("name", ["scatter_array_split", "scatter_drops", "parallel_apply_reversed",
                                  "gather_reversed", "reduce_summed", "reduce_twice"])
def test_a6_mistakes_the_notebooks_text_shows_are_caught_publicly(name):
    piece = next(k for k in A6 if name.startswith(k.split("_")[0]))
    r = A6[piece](getattr(a6_solutions, name), "torch")
    assert not r.passed and r.advisory, r.text()
