"""grader.lab.scale.compare: the planner beside PyTorch's accounting of rank 0 of
layouts of 64 to 512 ranks (fake process group, FSDPMemTracker, CommDebugMode), for the
capstone's model at Llama-3-8B's sizes with 2 of its blocks, as the scale page runs
them: the corrected planner agrees within the stated tolerance on parameters,
gradients and optimizer states, and its collective counts equal the tracker's."""
from __future__ import annotations

import pytest

from grader.lab.planner.composed import Layout
from grader.lab.scale import compare as scale
from grader.lab.scale import release

# the page's layouts: FSDP alone and DP x TP (64 ranks), FSDP x TP, HSDP x TP and
# FSDP x TP x PP (512 ranks)
LAYOUTS = scale.LAYOUTS


@pytest.fixture(scope="module")
def rows():
    try:
        yield {t: scale.compare(Layout.parse(t), scale.LLAMA3_8B, blocks=2)
               for t in LAYOUTS}
    finally:
        release()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_planner_holds_each_kind_of_memory_within_the_tolerance(rows, layout):
    row = rows[layout]
    for kind in ("params", "grads", "optimizer"):
        t, p = row.tracked.memory[kind], row.planner[kind]
        assert t > 0 and abs(p - t) <= scale.TOLERANCE * t, (kind, t, p)
    assert scale.disagreements(row) == []


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_planner_counts_the_collectives_the_tracker_counted(rows, layout):
    row = rows[layout]
    assert row.ops_tracked and row.ops_planner == row.ops_tracked


def test_the_general_model_it_corrects_was_off_where_the_page_says(rows):
    # sharded.py sized FSDP-64's gathered memory by two blocks and its gradients by
    # their shards: several times off; its counts took the root as two units
    kinds = {k for k, *_ in scale.disagreements(rows["1x64x1x1"], "general")}
    assert {"params", "grads"} <= kinds
    assert rows["1x64x1x1"].ops_general != rows["1x64x1x1"].ops_tracked


def test_a_pipeline_stage_holds_the_micro_batches_in_flight(rows):
    row = rows["1x32x8x2"]
    assert row.tracked.in_flight == 2 and row.tracked.model.blocks == 2
    assert "send" not in row.ops_planner            # the stage alone sends nothing


def test_the_tables_mark_what_disagrees_and_stay_on_the_page(rows):
    rs = list(rows.values())
    memory, ops, fit = (scale.memory_table(rs), scale.collectives_table(rs),
                        scale.fit_table(rs))
    assert "!" in memory and "DIFFER" not in ops and "fits" in fit
    assert max(len(line) for text in (memory, ops, fit)
               for line in text.splitlines()) <= 100


def test_the_recorded_gloo_run_is_compared_count_by_count():
    record = {"result": {
        "sizes": {"vocab": 64, "width": 32, "heads": 4, "blocks": 2, "seq": 16,
                  "batch": 8, "micro": 2},
        "runs": [{"layout": "2x2x2x2", "collectives": [
            *[("allgather_base", 1)] * 4, *[("all_reduce", 1)] * 16,
            *[("reduce_scatter_base", 1)] * 2, ("send", 1), ("send", 1),
            ("recv", 1), ("recv", 1)]}]}}
    assert scale.recorded_match(record) is True
    record["result"]["runs"][0]["collectives"].pop()       # one receive fewer
    assert scale.recorded_match(record) is False
    assert scale.recorded_match(None) is None and scale.recorded_rows(None) == []
