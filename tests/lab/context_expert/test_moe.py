"""The expert-parallelism page helpers, on runs built in memory."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest

from grader.lab.context_expert import (capacity_dropped, drop_words, exchange_bytes,
                                       expert_load, load_figure)

SENT = [[10, 2, 4, 0], [6, 6, 2, 2]]      # what each of 2 ranks sent to 4 experts


def _conf(factor, capacity):
    coll = [["all_to_all_single", 4 * capacity * 64 * 4]] * 4
    return {"capacity_factor": factor, "capacity": capacity, "ranks": [
        {"rank": r, "sent": SENT[r], "kept": [min(n, capacity) for n in SENT[r]],
         "collectives": coll} for r in range(2)]}


RUN = {"world": 2, "experts": 4, "runs": [_conf(0.5, 2), _conf(1.0, 4), _conf(2.0, 10)]}


def test_load_sums_the_ranks_and_drops_are_sent_minus_kept():
    load = expert_load(RUN["runs"][1])
    assert load["sent"] == [16, 8, 6, 2]
    assert load["kept"] == [8, 6, 6, 2]
    assert load["dropped"] == [8, 2, 0, 0]


def test_the_capacity_rule_drops_beyond_capacity_per_rank():
    assert capacity_dropped(SENT, 4) == [8, 2, 0, 0]
    assert capacity_dropped(SENT, 100) == [0, 0, 0, 0]
    # per rank, not overall: expert 1 gets 8 < 2 x 4 in all, yet rank 1 sends 6 > 4
    assert capacity_dropped(SENT, 4)[1] == 2


def test_exchanges_are_read_once_and_must_agree_across_ranks():
    assert exchange_bytes(RUN["runs"][0]) == [("all_to_all_single", 2048)] * 4
    bad = _conf(1.0, 4)
    bad["ranks"][1]["collectives"] = bad["ranks"][1]["collectives"][:2]
    with pytest.raises(ValueError):
        exchange_bytes(bad)


def test_words_count_the_drops_and_name_the_first_factor_without_any():
    text = drop_words(RUN)
    assert "at capacity factor 0.5, 18 assignments dropped (56%)" in text
    assert "From capacity factor 2 on, every expert had room" in text
    text = drop_words({"runs": RUN["runs"][:1]})
    assert "Even the largest capacity factor tried dropped some" in text


def test_figure_draws_sent_and_kept_per_expert_and_a_line_per_capacity():
    fig = load_figure({"a": RUN, "b": RUN}, "t")
    ax = fig.axes[0]
    assert len(ax.patches) == 4 + 3 * 4
    assert sorted(line.get_ydata()[0] for line in ax.lines) == [4, 8, 20]
