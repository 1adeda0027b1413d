"""Assignment 10's checks: Megatron's f and g and a tensor-parallel MLP on counted gloo ranks.

Starting the ranks costs seconds (four processes import the framework), so the answers are
graded in few launches: one per framework and task runs every answer of :mod:`a10_solutions`
(``drive_variants``), and the graded checks' verdicts are read from each answer's part of
the logs (``judge_f_g`` / ``judge_tp_mlp``, what ``check_f_g`` / ``check_tp_mlp`` return after
their own launch). ``check_f_g`` and ``check_tp_mlp`` themselves, on functions of a notebook,
run in ``tests/grading/test_a10_graded.py`` (the real pipeline), and so do the public checks
on a notebook's functions (their source asked of the kernel)."""
from __future__ import annotations

import numpy as np
import pytest

from grader.checks import a10_tensor_parallel as public
from tests.checks import a10_solutions as sol
from tests.checks.notebooks import hidden_checks, reference, source_notebook

A = "a10_tensor_parallel"
a10 = hidden_checks(A)


def _answers(name: str) -> dict:
    if name == "reference":
        return reference(A)
    if name in sol.CORRECT:
        return sol.CORRECT[name]
    return {**reference(A), **sol.WRONG[name][0]}


def _framework(answers: dict) -> str:
    return "paddle" if 'FRAMEWORK = "paddle"' in answers["f_g"] else "torch"


def _launch(variants: list[tuple], inputs: list[dict], task: str, framework: str) -> list[dict]:
    """Run each ``(name, source, driver)`` on the ranks, all in one launch."""
    program = {"module": f"a10_batch_{task}_{framework}", "name": "VARIANTS",
               "source": public.PREAMBLE[framework] + f"\nVARIANTS = {variants!r}\n",
               "driver": f"{public.__name__}:drive_variants"}
    logs = public.run_program(program, inputs, framework, "drive_variants", timeout=60)
    assert not isinstance(logs, str), logs
    return logs


def _batch(names: list[str], task: str, framework: str, seed: int) -> dict[str, list]:
    """Grade the answers ``names`` (one framework) for ``task`` in one launch of the ranks."""
    if task == "f_g":
        inputs, driver = a10.f_g_case(seed), "drive_f_g"
        variants = [(n, _answers(n)["f_g"], driver) for n in names]
    else:
        inputs, driver = a10.mlp_case(seed), "drive_mlp"
        variants = [(n, _answers(n)["tp_mlp"] + a10.COURSE_F_G[framework], driver) for n in names]
    logs = _launch(variants, inputs, task, framework)
    judge = a10.judge_f_g if task == "f_g" else a10.judge_tp_mlp
    return {n: judge(public.variant_logs(logs, n), inputs) for n in names}


def _torch_names(task: str) -> list[str]:
    correct = [n for n in sol.CORRECT if _framework(sol.CORRECT[n]) == "torch"]
    wrong = [n for n, (answers, *_) in sol.WRONG.items() if task in answers]
    return ["reference"] + correct + wrong


@pytest.fixture(scope="module")
def graded():
    """Every answer's results, from 4 launches (torch and Paddle, f/g and the MLP)."""
    out: dict[tuple[str, str], list] = {}
    for task in ("f_g", "tp_mlp"):
        for name, results in _batch(_torch_names(task), task, "torch", seed=11).items():
            out[(name, task)] = results
        paddle = [n for n in sol.CORRECT if _framework(sol.CORRECT[n]) == "paddle"]
        for name, results in _batch(paddle, task, "paddle", seed=12).items():
            out[(name, task)] = results
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["reference", *sorted(sol.CORRECT)])
def test_correct_answers_score_full_marks_in_both_frameworks(graded, name):
    for task, full in (("f_g", [1, 1, 1, 1]), ("tp_mlp", [3, 1, 2])):
        results = graded[(name, task)]
        assert [r.points for r in results] == full, "\n".join(r.text() for r in results)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(sol.WRONG))
def test_a_typical_mistake_loses_its_points_with_a_first_hint_that_names_it(graded, name):
    answers, fg_points, mlp_points, words = sol.WRONG[name]
    task, want = ("f_g", fg_points) if "f_g" in answers else ("tp_mlp", mlp_points)
    results = graded[(name, task)]
    text = "\n".join(r.text() for r in results)
    assert [r.points for r in results] == want, text
    first = next(r for r in results if not r.passed)
    assert words in f"{first.message}\n{first.hint}", text


@pytest.mark.slow
def test_every_correct_answer_passes_the_public_checks_and_each_mistake_is_caught():
    """On the notebook's worked example (the public checks' inputs), every correct torch answer
    passes both public checks; each typical mistake is told so (advisory: the cell goes on to
    the graded checks) by the public check of its task. Two launches, all answers in each."""
    names = _torch_names("f_g") + [n for n in _torch_names("tp_mlp") if n not in _torch_names("f_g")]
    fg = _launch([(n, _answers(n)["f_g"], "drive_f_g") for n in names],
                 [dict(t) for t in public.FG_EXAMPLE], "f_g", "torch")
    mlp = _launch([(n, "\n\n".join([_answers(n)["tp_mlp"], _answers(n)["f_g"]]), "drive_mlp")
                   for n in names], public.example_inputs(**public.EXAMPLE), "tp_mlp", "torch")
    for n in names:
        verdicts = [public.public_f_g_verdict(public.variant_logs(fg, n)),
                    public.public_tp_mlp_verdict(public.variant_logs(mlp, n))]
        if n not in sol.WRONG:
            assert all(v.passed for v in verdicts), (n, [v.text() for v in verdicts])
            continue
        v = verdicts[0] if "f_g" in sol.WRONG[n][0] else verdicts[1]
        # an answer that runs is told so and the cell goes on (advisory); the released stub
        # fails the cell (validate --invert needs that)
        assert not v.passed and v.advisory == (n != "f_g_as_released"), (n, v.text())


# -- cheap tests: no ranks -------------------------------------------------------------------
def _fake_f_g_logs(inputs, f_fwd, f_bwd, g_fwd, g_bwd, all_reduces=True):
    """Logs as drive_f_g and the relays write them: f's backward all-reduces the rank's dy and
    g's forward its x (``all_reduces``), or no collective at all (a sum made otherwise)."""
    phases = [{"label": k, "got": {}} for k in ("f_fwd", "f_bwd", "g_fwd", "g_bwd")]
    return [{"got": {"f_fwd": f_fwd[r], "f_bwd": f_bwd[r], "g_fwd": g_fwd[r], "g_bwd": g_bwd[r]},
             "events": [{"name": "all_reduce", "t": [inputs[r]["dy"]], "phase": 1},
                        {"name": "all_reduce", "t": [inputs[r]["x"]], "phase": 2}] if all_reduces else [],
             "phases": phases, "sent_to": [], "recvs": 0} for r in range(len(inputs))]


def test_the_f_g_verdicts_follow_the_values_each_rank_returned():
    inputs = a10.f_g_case(3)
    xs, dys = [t["x"] for t in inputs], [t["dy"] for t in inputs]
    sx, sdy = sum(xs), sum(dys)
    right = a10.judge_f_g(_fake_f_g_logs(inputs, xs, [sdy] * 2, [sx] * 2, dys), inputs)
    assert [r.points for r in right] == [1, 1, 1, 1]
    wrong = a10.judge_f_g(_fake_f_g_logs(inputs, xs, dys, [sx] * 2, [sdy] * 2), inputs)
    assert [r.points for r in wrong] == [1, 0, 1, 0]
    assert "must all-reduce it" in wrong[1].hint and "is the identity" in wrong[3].hint
    # the right values, but the relays saw no all-reduce: the sums were not Megatron's
    quiet = a10.judge_f_g(_fake_f_g_logs(inputs, xs, [sdy] * 2, [sx] * 2, dys, all_reduces=False),
                          inputs)
    assert [r.points for r in quiet] == [1, 0, 0, 1] and "not one all-reduce" in quiet[1].seen


def test_the_inputs_are_the_courses_draw_and_the_ranks_see_different_x_in_task_1():
    a, b = a10.f_g_case(), a10.f_g_case()
    assert np.array_equal(a[0]["x"], b[0]["x"])     # the same on every run (the course's secret)
    assert not np.array_equal(a[0]["x"], a10.f_g_case(7)[0]["x"])
    assert not np.array_equal(a[0]["x"], a[1]["x"])      # f and g show only by communicating
    m = a10.mlp_case()
    assert all(np.array_equal(m[0][k], m[1][k]) for k in m[0])   # the MLP's input is replicated
    assert m[0]["x"].shape[1] != m[0]["w1"].shape[1]    # d != h: a split by rows shows in shapes


def test_the_partial_sums_add_up_to_the_mlp_and_a_rows_split_does_not():
    """The grader's one-device truth is self-consistent: the ranks' column-block partial sums
    plus b2 give y, and the split by rows (GELU of a partial sum) does not."""
    t = a10.mlp_case(5)[0]
    truth = a10._mlp_truth(t, 2)
    assert np.allclose(sum(truth["partial"]) + truth["b2"], truth["y"])
    assert not any(np.allclose(v, truth["y"], atol=1e-3) for v in truth["by_rows"])


def test_the_notebook_states_the_example_the_public_check_uses():
    y = public._example_y()
    text = "\n".join(c.source for c in source_notebook(A).cells if c.cell_type == "markdown")
    for row in np.round(y, 4).tolist():
        assert str(row) in text
    assert "[1.5, 0.5, -0.5]" in text and "[11, 22, 33]" in text


def test_no_importable_function_of_the_course_computes_the_mlp_or_f_and_g():
    """The public module holds drivers and the example, never an answer: it defines no
    tp_mlp, f or g, and no function that takes the MLP's arguments."""
    import inspect

    for name, fn in vars(public).items():
        if inspect.isfunction(fn) and fn.__module__ == public.__name__:
            params = list(inspect.signature(fn).parameters)
            assert name not in ("f", "g", "tp_mlp"), name
            assert params[:5] != ["x", "w1", "b1", "w2", "b2"], name


def test_the_committed_samples_are_the_answers_graded_here_by_name():
    """alice's, bob's and carol's notebooks hold these answers (the pipeline's test grades
    alice and bob; carol's scores are f_g_as_released's and mlp_all_local's above)."""
    from tests.checks.samples_a10 import SCORES
    from tests.checks.test_samples_a5_a8 import answers

    want = {"alice": (sol.FG_PADDLE, sol.MLP_PADDLE),
            "bob": (sol.FG_F_IDENTITY_BACKWARD, sol.MLP_BIAS_BEFORE),
            "carol": (sol.FG_RELEASED, sol.MLP_ALL_LOCAL)}
    for student, (fg, mlp) in want.items():
        got = answers(student, A)
        assert (got["f_g"].strip(), got["tp_mlp"].strip()) == (fg.strip(), mlp.strip()), student
    assert SCORES["carol"] == (sum(sol.WRONG["f_g_as_released"][1]), sum(sol.WRONG["mlp_all_local"][2]))
    assert SCORES["bob"] == (sum(sol.WRONG["f_identity_backward"][1]), sum(sol.WRONG["bias_on_every_rank"][2]))
