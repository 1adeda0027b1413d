"""Assignment 12's checks: the activation bytes of a transformer block from its shapes,
against the bytes the judge's block saves for backward (counted with saved_tensors_hooks);
the block's count equals the notebook's table, and recomputation changes no gradient."""
import pytest

from grader.checks import a12_activation_memory as public

from . import a12_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks, namespace

A = "a12_activation_memory"
a12 = hidden_checks(A)
CHECKS = [("check_activation_bytes", "activation_bytes")]
globals().update(assignment_tests(a12, solutions, A, CHECKS))


@pytest.mark.parametrize("w", [2, 4])
def test_the_counted_bytes_are_the_notebooks_table_exactly(w):
    """The table the notebook states is what saved_tensors_hooks sees, term by term
    (LayerNorm statistics included), with and without selective recomputation."""
    for c in a12.CASES[:2] + a12.WIDE:
        for sel in (False, True):
            assert a12.counted_bytes(*c, w=w, selective=sel) == a12.bytes_by_rule(
                *c, w=w, selective=sel), (c, w, sel)


def test_the_papers_16_bit_formula_is_the_table_without_the_statistics():
    s, b, h, a = 2048, 1, 4096, 32
    assert a12.bytes_by_rule(s, b, h, a, stats=False) == s * b * h * (34 + 5 * a * s / h)
    assert public.EXAMPLE["full"] == (a12.bytes_by_rule(s, b, h, a, stats=False),
                                      a12.bytes_by_rule(s, b, h, a))
    assert public.EXAMPLE["selective"] == (
        a12.bytes_by_rule(s, b, h, a, selective=True, stats=False),
        a12.bytes_by_rule(s, b, h, a, selective=True))


def test_recomputation_changes_no_gradient():
    import torch

    grads = []
    for selective in (False, True):
        torch.manual_seed(0)
        block = a12._block_class()(16, 2).double()
        x = torch.randn(2, 8, 16, dtype=torch.double, requires_grad=True)
        torch.manual_seed(1)
        block(x, selective).sum().backward()
        grads.append([x.grad] + [p.grad for p in block.parameters()])
    for g0, g1 in zip(*grads):
        torch.testing.assert_close(g0, g1)


def test_the_public_check_passes_the_reference_and_catches_the_notebooks_example():
    ns = namespace(A, {})
    r = public.public_activation_bytes(ns["activation_bytes"])
    assert r.passed, r.text()
    assert "/" not in r.text(points=False).split(" - ")[0]
    for name in ("no_scores", "elements", "selective_ignored"):
        wrong = namespace(A, solutions.WRONG[name][0])["activation_bytes"]
        assert not public.public_activation_bytes(wrong).passed, name
    assert all(c[0] < 2048 for c in a12.CASES + a12.WIDE)      # the example is no hidden case


def test_a_non_number_gets_a_clear_message_not_a_crash():
    r = a12.check_activation_bytes(lambda *args, **kw: "many")
    assert r.points == 0 and "number of bytes" in r.message


def test_no_importable_function_of_the_course_answers_a12():
    import inspect

    import grader.checks.a12_activation_memory as mod
    import grader.checks.result as res
    import grader.checks.support as sup
    import grader.lab.planner as planner

    found = []
    for module in (mod, res, sup, planner):
        for n, obj in vars(module).items():
            if inspect.isfunction(obj):
                try:
                    points = a12.check_activation_bytes(obj).points
                except Exception:      # noqa: BLE001 - a crash is no answer
                    points = 0
                if points:
                    found.append((module.__name__, n, points))
    assert not found, found


@pytest.mark.parametrize("student, expected", [("alice", 5), ("bob", 2), ("carol", 0)])
def test_sample_submissions_score_as_documented(student, expected):
    from tests.checks.test_samples_a5_a8 import answers

    ns = namespace(A, answers(student, A))
    assert sum(r.points for r in a12.check_all(ns["activation_bytes"])) == expected


@pytest.mark.parametrize("name", sorted(solutions.CORRECT))
def test_every_correct_answer_passes_the_public_check(name):
    ns = namespace(A, solutions.CORRECT[name])
    assert public.public_activation_bytes(ns["activation_bytes"]).passed
