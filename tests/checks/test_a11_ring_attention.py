"""Assignment 11's checks: the online-softmax merge and ring attention for one query block,
compared with full attention; correct answers in PyTorch and Paddle score full marks, each
typical mistake loses its points with the hint that names it (tensors only: fast)."""
import numpy as np
import pytest

from grader.checks import a11_ring_attention as public

from . import a11_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks, namespace, reference

A = "a11_ring_attention"
a11 = hidden_checks(A)
CHECKS = [("check_merge", "merge"), ("check_ring_attention", "ring_attention")]
globals().update(assignment_tests(a11, solutions, A, CHECKS))


def test_the_judges_attention_is_softmax_attention_and_the_rules_reproduce_it():
    """attention_over_keys against a direct softmax; merge_by_rule and ring_by_rule
    without mistakes equal it on every hidden case."""
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 5, 4))
    s = q @ k.T / 2.0
    p = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    o, lse = a11.attention_over_keys(q, k, v)
    assert np.allclose(o, p @ v) and np.allclose(lse, np.log(np.exp(s).sum(axis=1)))
    for cases in a11.RING_CASES.values():
        for case in cases:
            drawn = a11._draw(**case)
            want, got = a11._full(*drawn), a11.ring_by_rule(*drawn)
            assert a11._same(got[0], want[0]) and a11._same(got[1], want[1])


def test_the_hidden_cases_hold_what_the_notebook_says_they_do():
    """Fully masked rows, whole future blocks under the causal mask, uneven blocks and
    lse near 1000 are all in the graded cases."""
    _, lse = a11._full(*a11._draw(**a11.RING_CASES["no_key"][0]))
    assert np.isneginf(lse).sum() == 2
    _, _, _, masks = a11._draw(**a11.RING_CASES["causal"][0])
    assert not masks[3].any() and masks[0].all()
    assert len(set(a11.RING_CASES["uneven"][0]["sizes"])) == 4
    for cases in (a11.MERGE_CASES["large"], a11.RING_CASES["large"]):
        _, lse = a11._full(*a11._draw(**cases[0]))
        assert lse.max() > 500


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_the_public_checks_pass_the_reference_and_catch_the_notebooks_own_examples(framework):
    """They run the worked examples the notebook states (and only those): the reference
    passes; an averaging merge and a ring that ignores its masks fail; no points shown."""
    answers = {} if framework == "torch" else solutions.CORRECT["paddle_by_hand"]
    ns = namespace(A, answers)
    for check, fn in (("public_merge", "merge"), ("public_ring_attention", "ring_attention")):
        r = getattr(public, check)(ns[fn], framework)
        assert r.passed, r.text()
        assert "/" not in r.text(points=False).split(" - ")[0]          # no "1/1" for points that do not count
    wrong = namespace(A, {"merge": solutions.MERGE_AVERAGE})
    assert not public.public_merge(wrong["merge"]).passed
    wrong = namespace(A, {"ring_attention": solutions.RING_IGNORE_MASK})
    r = public.public_ring_attention(wrong["ring_attention"])
    assert not r.passed and "with the mask" in r.message


def test_the_public_examples_are_not_hidden_cases():
    ex = public.RING_EXAMPLE
    assert all(c["n"] > 1 for cases in a11.RING_CASES.values() for c in cases)
    assert len(ex["q"]) == 1


def test_a_paddle_answer_near_minus_87_for_a_row_with_no_key_counts_as_minus_inf():
    """Paddle 3.3.1's CPU exp(-inf) is 2.9e-39 in vectorised lanes: an honest answer's lse
    for a row with no key is about -87.3, below what float32 can hold as exp(lse)."""
    import paddle

    x = paddle.exp(paddle.full([16], float("-inf"))).numpy()
    assert (x < 1.2e-38).all()                 # 0 or a denormal, never a normal number
    assert a11._same([-87.3, 1.0], [-np.inf, 1.0]) and not a11._same([-50.0], [-np.inf])


def test_a_wrong_framework_name_scores_zero_with_a_hint():
    ns = namespace(A, {})
    for r in a11.check_all(ns["merge"], ns["ring_attention"], "jax"):
        assert r.points == 0 and "FRAMEWORK" in r.hint


def test_wrong_shapes_get_a_clear_message_not_a_crash():
    r = a11.check_merge(lambda o1, lse1, o2, lse2: o1)
    assert r.points == 0 and "pair" in r.message
    r = a11.check_ring_attention(lambda q, k, v, masks=None, merge=None: (q, q[:, 0]))
    assert r.points == 0 and "shape" in r.seen


def _importable_callables():
    """Every function (private ones too) of grader.checks' shared modules and of a11's
    public module, which a student's kernel can import."""
    import inspect

    import grader.checks.a11_ring_attention as mod
    import grader.checks.result as res
    import grader.checks.support as sup

    for module in (mod, res, sup):
        for n, obj in vars(module).items():
            if inspect.isfunction(obj) and obj.__module__ == module.__name__:
                yield f"{module.__name__}.{n}", obj


def test_no_importable_function_of_the_course_answers_a11():
    found = []
    for name, fn in _importable_callables():
        for check in (a11.check_merge, a11.check_ring_attention):
            try:
                points = check(fn).points
            except Exception:          # noqa: BLE001 - a crash is no answer
                points = 0
            if points:
                found.append((name, check.__name__, points))
    assert not found, found
    ns = namespace(A, {})
    assert a11.check_merge(ns["merge"]).points == 6        # the probe finds a real answer


@pytest.mark.parametrize("student, expected", [("alice", 12), ("bob", 10), ("carol", 0)])
def test_sample_submissions_score_as_documented(student, expected):
    from tests.checks.test_samples_a5_a8 import answers

    ns = namespace(A, answers(student, A))
    results = a11.check_all(ns["merge"], ns["ring_attention"], ns.get("FRAMEWORK", "torch"))
    assert sum(r.points for r in results) == expected, [r.text() for r in results]


def test_the_reference_is_what_the_notebook_shows():
    ref = reference(A)
    assert 'FRAMEWORK = "torch"  # or "paddle"' in ref["merge"]
    assert "merge(" in ref["ring_attention"]


def test_a_public_check_that_misses_the_example_says_so_without_failing_the_cell(capsys):
    """public() never raises: an answer that does not run (the released stub) is told so on
    stderr, which fails the cell under validate (validate --invert needs that), one that
    runs and misses the example on stdout: the graded check in the same cell still gives
    its points."""
    from grader.checks.support import public as show

    wrong = namespace(A, {"merge": solutions.MERGE_AVERAGE})["merge"]
    r = public.public_merge(wrong)
    assert not r.passed and r.advisory
    show(r)                                      # no AssertionError

    def stub(*args):
        raise NotImplementedError

    show(public.public_merge(stub))              # no AssertionError: stderr instead
    assert "not implemented" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(solutions.CORRECT))
def test_every_correct_answer_passes_the_public_checks(name):
    ns = namespace(A, solutions.CORRECT[name])
    fw = ns["FRAMEWORK"]
    assert public.public_merge(ns["merge"], fw).passed
    assert public.public_ring_attention(ns["ring_attention"], fw).passed


def test_a_paddle_ring_that_computes_the_whole_score_matrix_loses_the_long_sequences_points():
    """Issue 37.2 in Paddle (PyTorch's: ``ring_whole_score_matrix`` above): merges as asked,
    right numbers, and the whole score matrix beside them: the equal-blocks part's 2 points
    go, with the peak the trusted side measured and the bound; the honest Paddle ring keeps
    them (``paddle_by_hand``)."""
    answers = {"merge": solutions.MERGE_PADDLE,
               "ring_attention": solutions.RING_PADDLE_WHOLE_SCORES}
    ns = namespace(A, answers)
    r = a11.check_ring_attention(ns["ring_attention"], "paddle")
    assert r.points == 4, r.text()
    assert "more than one block's scores" in r.hint and "64 MB" in r.hint, r.text()


def test_the_long_sequence_separates_a_ring_from_the_whole_score_matrix():
    """The bound sits between what a ring needs and the whole matrix, with room both ways:
    8 blocks' scores above the ring's estimate, 40 % below the whole matrix."""
    b = a11.memory_bound(a11.MEMORY_CASE)
    assert b["whole"] == 64 * 2**20 and b["block"] < 1.1 * 2**20
    assert b["ring"] + 8 * b["block"] <= b["bound"] < 0.6 * b["whole"]


def test_where_memory_is_not_measured_the_ring_is_paid_and_the_feedback_says_so(monkeypatch):
    """Graded on a machine that gives the kernel no memory control group, the whole-matrix
    answer cannot be told from a ring by its memory: it is paid on the rest, and the message
    says that memory per call was not measured (GRADING.md, a11's row)."""
    import contextlib

    @contextlib.contextmanager
    def unmeasured(fn):
        yield a11.Reading(None, "not measured: this grading machine gives the kernel no "
                                "memory control group")

    monkeypatch.setattr(a11, "peak_of", unmeasured)
    ns = namespace(A, {"ring_attention": solutions.RING_WHOLE_SCORES})
    r = a11.check_ring_attention(ns["ring_attention"])
    assert r.points == 6 and "memory per call not measured" in r.message, r.text()
