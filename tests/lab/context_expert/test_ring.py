"""The ring-attention page helpers, on runs built in memory."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest

from grader.lab.context_expert import balance, balance_words, ring_figure, ring_rows


def _run(busy_contig, busy_zig, world=4):
    def conf(layout, causal, pairs, busy):
        return {"layout": layout, "causal": causal, "ranks": [
            {"rank": r, "chunks": [r, 2 * world - 1 - r], "pairs": pairs[r],
             "busy_s": [busy[r], 2 * busy[r], 1.5 * busy[r]], "wall_s": [0.1, 0.2, 0.3],
             "max_diff": 1e-7} for r in range(world)]}
    return {"world": world, "runs": [
        conf("contiguous", False, [4 * world] * world, [1.0] * world),
        conf("contiguous", True, [4 * r + 3 for r in range(world)], busy_contig),
        conf("zigzag", True, [2 * world + 1] * world, busy_zig)]}


def test_rows_take_the_fastest_repeat_and_keep_the_median_and_slowest():
    rows = ring_rows(_run([1, 2, 3, 4], [2, 2, 2, 2]))
    assert len(rows) == 12
    r = next(r for r in rows if r.layout == "contiguous" and r.causal and r.rank == 3)
    assert (r.pairs, r.busy, r.busy_median, r.busy_slowest) == (15, 4, 6, 8)
    assert r.config == "contiguous, causal"


def test_balance_is_the_busiest_rank_over_the_mean():
    rows = ring_rows(_run([1, 2, 3, 4], [2, 2, 2, 2]))
    c = balance(rows, "contiguous", True)
    assert (c["pairs_max"], c["pairs_min"], c["total_pairs"]) == (15, 3, 36)
    assert c["pairs_ratio"] == pytest.approx(15 / 9)
    assert c["busy_ratio"] == pytest.approx(4 / 2.5)
    assert balance(rows, "zigzag", True)["pairs_ratio"] == 1.0
    with pytest.raises(ValueError):
        balance(rows, "zigzag", False)


def test_words_follow_the_times_when_they_agree_with_the_counts():
    text = balance_words(ring_rows(_run([1, 2, 3, 4], [2, 2, 2, 2])))
    assert "busiest rank 15 chunk pairs against the least busy's 3" in text
    assert "as many on every rank" in text
    assert "The measured CPU time follows" in text and "1.60 times" in text


def test_words_say_when_noisy_times_do_not_show_the_imbalance():
    text = balance_words(ring_rows(_run([2, 2, 2, 2.1], [2, 2, 1, 3])))
    assert "does not show it clearly" in text
    assert "follows" not in text


def test_figure_has_a_bar_per_rank_and_layout_in_both_panels():
    fig = ring_figure(ring_rows(_run([1, 2, 3, 4], [2, 2, 2, 2])), "t")
    left, right = fig.axes
    assert len(left.patches) == len(right.patches) == 8
    assert sorted(p.get_height() for p in left.patches)[-1] == 15
