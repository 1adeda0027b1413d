"""Assignment 13's checks: rank 0's memory of a composed layout, and the layout for a
budget, against the grader's own run of each layout (one rank of a fake process group);
the notebook's rules are that run's measurement exactly."""
import pytest

from grader.checks import a13_composed_layout as public

from . import a13_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import ROOT, hidden_checks, namespace

A = "a13_composed_layout"
a13 = hidden_checks(A)
CHECKS = [("check_predict_memory", "predict_memory"), ("check_choose_layout", "choose_layout")]
globals().update(assignment_tests(a13, solutions, A, CHECKS))


def _exact(model, layout):
    for stage in range(layout[3]):
        run = a13.run_layout(a13.sizes_of(model), layout, stage)
        assert run.memory == pytest.approx(a13.by_rule(model, layout, stage), abs=0.5), \
            (model, layout, stage)
        if stage == 0:
            assert run.comm_bytes == a13.comm_by_rule(model, layout), (model, layout)


def test_the_rules_are_the_run_on_the_layouts_the_cases_draw():
    """Memory of every stage and rank 0's communication, by the notebook's rules, equal the
    grader's run byte for byte (the checks' reference for the layouts a student did not
    choose is the rule)."""
    for model, layout in a13.predict_cases():
        _exact(model, layout)
    for model, ranks, budget in a13.choose_cases():
        for layout in a13.fitting_layouts(model, ranks, budget)[:3]:
            _exact(model, layout)


@pytest.mark.slow
@pytest.mark.parametrize("m", range(len(a13.MODELS)))
def test_the_rules_are_the_run_on_every_layout_of_every_model(m):
    model = a13.MODELS[m]
    for ranks in (4, 8):
        for layout in a13.candidates(model, ranks):
            _exact(model, layout)


def test_the_judges_model_is_the_capstones():
    """The same parameters, initial weights and output as chapters/scripts/capstone_torch.py's
    Model at the script's sizes (the judge keeps its own copy: chapters/ is not on a
    confined judge's path)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(
        "capstone_torch", ROOT / "chapters" / "scripts" / "capstone_torch.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    theirs = script.Model()
    ours = a13.capstone_model(script.VOCAB, script.WIDTH, script.HEADS, script.BLOCKS)
    assert [(n, p.shape) for n, p in theirs.named_parameters()] == \
        [(n, p.shape) for n, p in ours.named_parameters()]
    x = torch.randint(0, script.VOCAB, (2, script.SEQ))
    torch.testing.assert_close(ours(x), theirs(x))


def test_the_notebooks_example_is_the_run():
    run = a13.run_layout(a13.sizes_of(public.MODEL), public.EXAMPLE["layout"], 0)
    assert run.memory == public.EXAMPLE["memory"]
    assert (public.MODEL, public.EXAMPLE["layout"]) not in a13.predict_cases()


def test_the_run_is_the_planners_gradients_and_optimizer_state_but_for_two_simplifications():
    """The planner (grader.lab.planner.composed.predict, on the capstone's one Layout)
    prices the same layouts. Its gradients and Adam's state are the run's exactly once its
    two simplifications are undone: it divides a whole block by tp (the run keeps the
    LayerNorms and row-parallel biases, 6 x width values, whole) and keeps the head whole
    (the run splits it). Its parameters add FSDP's gathered blocks and its activations use
    a rougher formula (4 to 49 % above the run on these layouts): neither is compared."""
    from grader.lab.planner.cluster import PRESETS
    from grader.lab.planner.composed import Layout, predict
    from grader.lab.planner.sharded import Transformer

    for model in a13.MODELS[:2]:
        V, W = model["vocab"], model["width"]
        t_ = Transformer(vocab=V, width=W, heads=model["heads"], blocks=model["blocks"],
                         seq=model["seq"], batch=model["batch"])
        for layout in [(1, 2, 2, 1), (2, 2, 1, 1), (2, 2, 2, 1)]:
            r, s, t, p = layout
            planned = predict(t_, Layout(*layout, micro=model["micro"]),
                              PRESETS["8 GPUs NVLink"]).memory_terms
            run = a13.run_layout(a13.sizes_of(model), layout, 0)
            undo = 4 * (1 - 1 / t) * ((W * V + V) - model["blocks"] * 6 * W) / s
            assert planned["grads"] - run.grads == pytest.approx(undo, abs=0.5), layout
            assert planned["optimizer"] - run.optimizer == pytest.approx(2 * undo, abs=1)


def test_each_case_draw_is_the_same_on_every_call():
    assert a13.predict_cases() == a13.predict_cases()
    assert a13.choose_cases() == a13.choose_cases()
    layouts = [lay for _, lay in a13.predict_cases()]
    assert any(lay[0] > 1 and lay[1] > 1 for lay in layouts)      # HSDP
    assert any(lay[2] > 1 for lay in layouts) and any(lay[3] > 1 for lay in layouts)
    for model, ranks, budget in a13.choose_cases():      # some layouts fit, some do not
        fit = a13.fitting_layouts(model, ranks, budget)
        assert 0 < len(fit) < len(a13.candidates(model, ranks)), (model, budget)


def test_a_layout_is_read_in_either_frameworks_words_and_refused_with_what_to_write():
    assert public.read_layout({"dp_replicate": 1, "dp_shard": 2, "tp": 2, "pp": 1}) == \
        (1, 2, 2, 1)
    assert public.read_layout({"dp_degree": 2, "sharding_degree": 1, "mp_degree": 2,
                               "pp_degree": 2}, "paddle") == (2, 1, 2, 2)
    assert public.read_layout(" 1x2x2x1 ", "paddle") == (1, 2, 2, 1)
    for bad, words in [({"tp": 2}, "keys are"), ("2-2", "RxSxTxP"), (8, "not int"),
                       (None, "every case the grader asks has layouts that fit"),
                       ({"dp_replicate": 0, "dp_shard": 2, "tp": 2, "pp": 1}, "at least 1")]:
        with pytest.raises(ValueError, match=words):
            public.read_layout(bad)


def test_a_layout_that_is_not_data_gets_a_clear_message():
    r = a13.check_choose_layout(lambda *a: [1, 2, 2, 1])
    assert r.points == 0 and "not list" in r.message
    r = a13.check_predict_memory(lambda *a: {"params": 1})
    assert r.points == 0 and "the keys must be" in r.message


def test_the_public_checks_pass_the_reference_and_catch_the_example():
    ns = namespace(A, {})
    assert public.public_predict_memory(ns["predict_memory"]).passed
    assert public.public_choose_layout(ns["choose_layout"]).passed
    wrong = namespace(A, solutions.WRONG["one_moment"][0])["predict_memory"]
    r = public.public_predict_memory(wrong)
    assert not r.passed and r.advisory and "optimizer" in r.message
    paddle = namespace(A, solutions.CORRECT["paddle"])
    assert public.public_predict_memory(paddle["predict_memory"], "paddle").passed


@pytest.mark.parametrize("student, expected", [("alice", (6, 4)), ("bob", (5, 1)),
                                               ("carol", (0, 0))])
def test_sample_submissions_score_as_documented(student, expected):
    from tests.checks.test_samples_a5_a8 import answers

    ns = namespace(A, answers(student, A))
    results = a13.check_all(ns["predict_memory"], ns["choose_layout"], ns["FRAMEWORK"])
    assert tuple(r.points for r in results) == expected, [r.text() for r in results]
    if student == "bob":        # his layouts look as if they fit with one moment
        assert "over the budget" in results[1].message
        assert "your predict_memory gives stage 0" in results[1].hint
        assert "bytes of optimizer" in results[1].hint
        assert results[1].hint.endswith("Adam keeps two moments per parameter (exp_avg and "
                                        "exp_avg_sq), not one")
