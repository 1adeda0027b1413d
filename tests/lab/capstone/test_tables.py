"""Measured beside predicted: the capstone's collectives and memory against the
planner's rules for its own functions (planner.composed), every difference stated with
its size. In memory: the recorded 16-rank run and small records written here."""
from __future__ import annotations

import copy
import json
from collections import Counter

import pytest

from grader.lab import capstone
from grader.lab.capstone import tables
from grader.lab.planner import composed
from grader.lab.planner.composed import Layout

RECORD = json.loads(capstone.RECORD_16.read_text())["result"]


def _record(layout: str, collectives, peak=None) -> dict:
    rec = copy.deepcopy(RECORD)
    run = {**rec["runs"][0], "layout": layout, "collectives": collectives,
           "peak_bytes": peak or {}, "control": False, "resumed": None}
    rec["runs"] = [run]
    return rec


def test_the_recorded_4d_run_counts_what_the_capstones_planner_lists():
    """The 16-rank run of 2x2x2x2 (real gloo ranks, Schedule1F1B): every count equal.
    sharded.step_collectives, which the table used before, lists no sends or
    receives and 10 all-reduces for it, not 16: this failed then."""
    (row,) = tables.layout_rows(RECORD)
    assert row["predicted"] == row["measured"] == Counter(
        all_gather=4, all_reduce=16, reduce_scatter=2, send=2, recv=2)
    assert tables.count_gaps([row]) == []
    assert tables.counts_words([row]) == \
        "rank 0's count of each collective equals the planner's in all 1 layouts"


def test_a_difference_is_stated_with_its_size():
    # 1x4x1x1's planner: 5 all-gathers, 3 reduce-scatters; measured one all-gather
    # fewer and an all-reduce the planner does not list
    ops = [("allgather_base", 10)] * 4 + [("reduce_scatter_base", 10)] * 3 + \
        [("allreduce", 4)]
    (row,) = tables.layout_rows(_record("1x4x1x1", ops))
    assert tables.count_gaps([row]) == [("1x4x1x1", "all_gather", 4, 5),
                                        ("1x4x1x1", "all_reduce", 1, 0)]
    words = tables.counts_words([row])
    assert "1x4x1x1: all_gather 4 measured, 5 planned (-1)" in words
    assert "all_reduce 1 measured, 0 planned (+1)" in words
    assert tables.counts_words([]) == "no layout was measured"
    # each kind's bytes as the script sized its calls, shown under the counts
    assert row["sizes"] == Counter(all_gather=40, reduce_scatter=30, all_reduce=4)
    assert "sized:    all_gather 0 KiB, all_reduce 0 KiB, reduce_scatter 0 KiB" in \
        tables.layout_table([row])


PEAK = {"Parameter": 96_768, "Buffer": 0, "Gradient": 8_704, "Activation": 150_024,
        "Temp": 87_424, "Optstate": 0, "Other": 0, "Total": 342_920}


def test_memory_is_priced_by_the_capstones_own_rules_kind_by_kind():
    """The planner's side is composed.memory_terms for the layout (predict()'s general
    terms, used before, have no temporaries and other parameters: this failed then);
    each kind's gap is the planner's bytes less the measured."""
    rec = _record("1x4x1x1", [], PEAK)
    (row,) = tables.memory_rows(rec)
    planned = composed.memory_terms(tables.model_of(rec), Layout.parse("1x4x1x1", micro=2))
    assert row["planned"] == planned
    assert row["gaps"] == {"params": planned["params"] - PEAK["Parameter"],
                           "grads": planned["grads"] - PEAK["Gradient"],
                           "momentum": planned["optimizer"],
                           "activations": planned["activations"] - PEAK["Activation"],
                           "temporary": planned["temporaries"] - PEAK["Temp"]}
    assert row["error"] == pytest.approx(sum(planned.values()) / PEAK["Total"] - 1)
    words = tables.memory_words([row])
    for name, gap in row["gaps"].items():
        assert f"{name} {gap / 1024:+.1f} KiB" in words
    # a layout without a measurement (a pipeline's) has no row
    assert tables.memory_rows(_record("1x2x1x2", [], {})) == []


def test_momentum_left_out_by_the_tracker_is_measured_not_assumed():
    """MemTracker, given the optimizer before its first step, sees no momentum in a
    later step's peak; given it after, it does. The page says the first only when
    this measurement shows it."""
    before, after = tables.momentum_seen()
    assert before == 0 and after == 64 * 65 * 2 * 4       # both layers' momentum
    rows = tables.memory_rows(_record("1x4x1x1", [], PEAK))
    words = tables.momentum_words(rows, (before, after))
    assert "none of it" in words and "leave it out" in words
    # where the demonstration did not show it, no cause is named
    assert "leave it out" not in tables.momentum_words(rows, (after, after))
    held = copy.deepcopy(rows)
    held[0]["measured"]["Optstate"] = 2048
    assert tables.momentum_words(held, (before, after)) == \
        "the tracker counted from 2.0 to 2.0 KiB of it at the peak"


def _paddle_run(layout, ops, tensors=31, control=False, resumed=None):
    r, s, t, p = (int(n) for n in layout.split("x"))
    return {"layout": layout, "replicate": r, "shard": s, "tp": t, "pp": p,
            "control": control, "views": False, "resumed": resumed,
            "step_s": [0.5, 0.1, 0.2, 0.3], "wall_s": 1.0, "bytes_written": 2048,
            "collectives": {"ops": ops, "local": {}},
            "memory": {"tensors": tensors, "params": 4096, "grads": 4096, "optimizer": 0}}


def test_the_paddle_table_shows_the_recorded_cost_and_the_check_is_computed():
    rec = {"runs": [_paddle_run("4x1x1x1", {"all_reduce": 31, "all_gather": 1}),
                    _paddle_run("2x1x2x1", {"all_reduce": 47}),
                    _paddle_run("1x1x4x1", {"all_reduce": 16}),
                    _paddle_run("4x1x1x1", {"all_reduce": 32}, control=True)]}
    table = tables.paddle_cost_table(rec)
    assert "4x1x1x1: 200 ms per step, 1.0 s for the layout" in table
    assert "collectives: 1 all_gather, 31 all_reduce; wrote 2 KiB in a step" in table
    assert "4x1x1x1 (control)" in table and max(map(len, table.splitlines())) <= 100
    words = tables.paddle_comm_words(rec)
    assert words == ("4x1x1x1 ran 31 all-reduces for its 31 parameter tensors, one per "
                     "gradient; 2x1x2x1 ran 47: 31 for the gradients and 16 more, as many "
                     "as the 16 of 1x1x4x1")
    # a count that does not fit is said as it is
    rec["runs"][0]["collectives"]["ops"]["all_reduce"] = 30
    rec["runs"][1]["collectives"]["ops"]["all_reduce"] = 48
    words = tables.paddle_comm_words(rec)
    assert "4x1x1x1 ran 30 all-reduces for its 31 parameter tensors;" in words
    assert "17 more, not the 16 of 1x1x4x1" in words
    # a record of the script before it counted: said, not invented
    old = {"runs": [{k: v for k, v in rec["runs"][0].items()
                     if k not in ("collectives", "memory", "bytes_written")}]}
    assert "(no cost was recorded)" in tables.paddle_cost_table(old)
    assert tables.paddle_comm_words(old) == "no layout's collectives were recorded"


def test_a_long_list_of_collectives_wraps_to_the_pages_width():
    """The layout table's 'sized:' list continues on lines of its own under its first item
    (a fresh-clone build printed one of 105 characters, wider than the page)."""
    from grader.lab.capstone.tables import _listed

    items = [f"{op} {n} KiB" for op, n in (("all_gather", 79), ("all_reduce", 56), ("recv", 8),
                                             ("reduce_scatter", 29), ("send", 8))]
    lines = _listed("sized:", items)
    assert len(lines) == 2 and all(len(line) <= 100 for line in lines), lines
    assert " ".join(" ".join(lines).split()) == "sized: " + ", ".join(items)
    assert lines[1].index("send") == lines[0].index("all_gather")     # under the first item
    assert _listed("sized:", []) == [f"{'':9} sized:    none"]
