"""The stand-in's problem: torch.chunk's split, the same float32 start in both frameworks."""
import numpy as np
import pytest

from grader.lab.data_parallel.problem import make_problem, max_abs_diff, split_sizes, train_single

RTOL, ATOL = 1e-5, 1e-6


def _flat(ws):
    return np.concatenate([np.asarray(w).ravel() for w in ws])


@pytest.mark.parametrize("n, parts", [(512, 2), (10, 4), (10, 3), (6, 4), (3, 4), (7, 3),
                                      (1, 2), (9, 9)])
def test_split_sizes_are_those_of_torch_chunk(n, parts):
    import torch

    expected = [len(c) for c in torch.arange(n).chunk(parts)]
    assert split_sizes(n, parts) == expected
    assert sum(split_sizes(n, parts)) == n


def test_ten_rows_on_three_devices_split_4_4_2_unlike_array_split():
    assert split_sizes(10, 3) == [4, 4, 2]
    assert [len(a) for a in np.array_split(np.arange(10), 3)] == [4, 3, 3]


def test_splitting_nothing_is_an_error():
    with pytest.raises(ValueError, match="cannot split"):
        split_sizes(0, 2)


def test_both_frameworks_start_from_the_same_float32_problem():
    a, b = make_problem(seed=3), make_problem(seed=3)
    assert a.x.dtype == a.y.dtype == np.float32
    assert all(w.dtype == np.float32 for w in a.weights)
    assert max_abs_diff(a.weights, b.weights) == 0.0
    ref_t = train_single("torch", a, 2)
    ref_p = train_single("paddle", a, 2)
    np.testing.assert_allclose(_flat(ref_t["weights"]), _flat(ref_p["weights"]),
                               rtol=RTOL, atol=ATOL)
    assert max_abs_diff(ref_t["weights"], a.weights) > 1e-4  # it did train
