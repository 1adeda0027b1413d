"""The pipeline-schedules page's PyTorch script, started with torchrun on 2 gloo ranks:
every schedule of torch.distributed.pipelining it tries runs on CPU ranks, trains the
stages to the whole model's weights, runs each micro-batch's passes once per stage,
holds the micro-batches the formulas say, and its order, replayed on equal stages,
idles what its formula says."""
from __future__ import annotations

import json

import pytest

from grader.lab.pipeline_schedules import rows
from grader.lab.planner import schedules as S

from ._run import BIN, SCRIPTS, run

pytestmark = pytest.mark.slow
MICRO = 4


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("sched")
    run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2",
         str(SCRIPTS / "schedules_torch.py"), "--micro", str(MICRO), "--out", "s.json"],
        out, timeout=600)
    return json.loads((out / "s.json").read_text())


def test_every_schedule_runs_and_trains_to_the_whole_models_weights(launched):
    assert launched["failed"] == {}
    found = rows(launched)
    assert [r.schedule for r in found] == ["GPipe", "1F1B", "Interleaved 1F1B",
                                           "Interleaved zero bubble", "ZBV zero bubble"]
    assert all(r.weight_diff <= 1e-4 for r in found)


def test_each_stage_runs_each_micro_batchs_passes_once(launched):
    for r in rows(launched):
        for rank, order in enumerate(r.orders):
            kinds = "FBW" if "zero bubble" in r.schedule else "FB"
            stages = {s for _, s, _ in order}
            assert len(stages) == r.virtual
            assert sorted(order) == sorted((k, s, i) for k in kinds for s in stages
                                           for i in range(MICRO))


def test_the_orders_hold_what_the_formulas_say_and_idle_it_on_equal_stages(launched):
    for r in rows(launched):
        assert r.in_flight == [round(r.virtual * S.in_flight(r.schedule, 2, MICRO, k))
                               for k in range(2)], r.schedule
        assert r.equal == pytest.approx(r.formula, abs=1e-9), r.schedule
        assert all(0 < b < 1 for b in r.bubbles) and len(r.bubbles) == 2


def test_the_v_puts_the_first_and_last_stage_on_rank_0(launched):
    zbv = next(r for r in rows(launched) if r.schedule == "ZBV zero bubble")
    assert {s for _, s, _ in zbv.orders[0]} == {0, 3}
    assert {s for _, s, _ in zbv.orders[1]} == {1, 2}
