"""The sentences the fitting chapter's numbers choose, and the sorting of saved tensors."""
import pytest

from grader.lab.fitting.breakdown import sort_saved
from grader.lab.fitting.words import agreement, precision_sentence, recompute_sentence


def test_agreement_says_exactly_or_by_how_much_and_which_way():
    assert agreement(100, 100) == "exactly as predicted"
    assert agreement(101, 100) == "1.0% more than predicted"
    assert agreement(95, 100) == "5.0% less than predicted"


def test_a_cost_the_repeats_cannot_separate_from_noise_is_not_called_a_cost():
    s = recompute_sentence("Full", 1e6, 1e7, [0.11, 0.2, 0.12], [0.1, 0.15, 0.1])
    assert "cannot tell" in s and "longer" not in s and "10%" in s


def test_a_separated_cost_is_stated_with_its_direction():
    s = recompute_sentence("Full", 1e6, 1e7, [0.13, 0.14, 0.13], [0.1, 0.1, 0.11])
    assert "30% longer" in s and "cannot" not in s
    s = recompute_sentence("Full", 1e6, 1e7, [0.05, 0.05, 0.06], [0.1, 0.1, 0.11])
    assert "shorter" in s


def test_the_precision_sentence_states_the_largest_difference_and_where():
    s = precision_sentence([5.0, 4.0, 3.0], [5.0, 4.1, 3.0], "BF16")
    assert "within 0.1" in s and "step 2" in s and "3 steps" in s
    assert "same losses" in precision_sentence([1.0], [1.0], "BF16")
    with pytest.raises(ValueError):
        precision_sentence([1.0], [], "BF16")


def test_saved_tensors_are_sorted_by_their_shapes():
    s, b, h, a = 4, 2, 8, 3       # scores (b a s s = 96) and s·b·h (64) apart
    shapes = [("block 0", (b, s, h), "float32", 4 * b * s * h),
              ("block 0", (b, s, 4 * h), "float32", 16 * b * s * h),
              ("block 0", (b, a, s, s), "float32", 4 * b * a * s * s),
              ("block 0", (b, s, 1), "float32", 4 * b * s),
              ("block 0", (s, s), "torch.bool", s * s),
              ("block 0", (3, 5), "float32", 60),
              ("block 1", (b, s, h), "float32", 999)]
    kinds = sort_saved(shapes, "block 0", s, b, h, a)
    assert kinds == {"s·b·h-sized": 20 * b * s * h, "attention scores": 4 * b * a * s * s,
                     "norm statistics": 4 * b * s, "masks": s * s, "other": 60}
