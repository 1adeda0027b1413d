"""a10's first hint names the student's actual mistake (issue 35): a stub left as released,
a helper or alias the ranks do not have."""
import pytest

from grader.checks import a10_tensor_parallel as checks


def test_the_hint_names_the_stub_and_the_missing_name_and_keeps_the_default_otherwise():
    stub = checks.rank_error_hint("rank 0: NotImplementedError", "default")
    assert "stub" in stub and "NotImplementedError" in stub
    name = checks.rank_error_hint("rank 1 raised: NameError: name 'split_cols' is not defined",
                                  "default")
    assert "'split_cols' is not defined in the ranks" in name and "inside the function" in name
    assert "import torch.nn.functional as F" in name and "self-contained" not in name
    assert checks.rank_error_hint("rank 0: ValueError: shapes", "default") == "default"


def _helper(h):          # a module-level helper: the ranks run tp_mlp's source alone
    return h


@pytest.mark.slow
def test_a_released_stub_and_a_module_level_helper_get_their_own_hints():
    def f(x):
        raise NotImplementedError

    stub = checks.public_f_g(f, f, "torch")
    assert "stub" in stub.hint, stub.text()

    def tp_mlp(x, w1, b1, w2, b2, rank, world_size):
        n = w1.shape[1] // world_size
        lo, hi = rank * n, (rank + 1) * n
        h = F.gelu(f_ok(x) @ w1[:, lo:hi] + b1[lo:hi])     # F: the ranks' import  # noqa: F821
        return g_ok(_helper(h) @ w2[lo:hi, :]) + b2        # noqa: F821

    def f_ok(x):
        return x

    def g_ok(x):
        dist.all_reduce(x)          # noqa: F821  (the ranks' import)
        return x

    helper = checks.public_tp_mlp(tp_mlp, f_ok, g_ok, "torch")
    assert not helper.passed and "'_helper' is not defined in the ranks" in helper.hint, helper.text()


def test_the_graded_cases_are_the_same_on_every_run_so_identical_notebooks_score_the_same():
    """Drawn from the course's secret (grader.grading.hidden.cases), not anew on each run."""
    import numpy as np

    from tests.checks.notebooks import hidden_checks

    a10 = hidden_checks("a10_tensor_parallel")
    for case in (a10.f_g_case, a10.mlp_case):
        one, two = case(), case()
        assert all(np.array_equal(a[k], b[k]) for a, b in zip(one, two) for k in a), case
