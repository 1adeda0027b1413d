"""The pipeline-schedules page's Paddle script: its hand-written orders run every
micro-batch's F and B exactly once per stage, in an order the stages can follow, with
the micro-batches in flight and the bubble (on equal stages) that the formulas give;
launched on 2 gloo ranks, it trains to the whole model's weights."""
from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from grader.lab.pipeline_schedules import in_flight, replay, rows
from grader.lab.pipeline_schedules.measure import bubble_of
from grader.lab.planner import schedules as S

from ._run import SCRIPTS, run

CASES = [(s, p, m) for s in ("GPipe", "1F1B", "Interleaved 1F1B", "ZB-H1")
         for p in (2, 4) for m in (4, 8)] + [("ZB-H1", 3, 6)]


@pytest.fixture(scope="module")
def script():
    """schedules_paddle.py as a module (it imports tinygpt_paddle from its folder)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location("schedules_paddle",
                                                      SCRIPTS / "schedules_paddle.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.mark.parametrize("schedule,p,m", CASES)
def test_each_stage_runs_every_micro_batchs_f_and_b_once(script, schedule, p, m):
    v = script.VIRTUAL[schedule]
    for rank in range(p):
        passes = script.order(schedule, rank, p, m)
        mine = range(rank, p * v, p)
        kinds = "FBW" if schedule == "ZB-H1" else "FB"
        want = sorted((k, s, i) for k in kinds for s in mine for i in range(m))
        assert sorted(passes) == want
        # a stage's backward of a micro-batch comes after its forward, W after B
        assert all(passes.index(("F", s, i)) < passes.index(("B", s, i))
                   for _, s, i in passes)
        assert all(passes.index(("B", s, i)) < passes.index(("W", s, i))
                   for k, s, i in passes if k == "W")


@pytest.mark.parametrize("schedule,p,m", CASES)
def test_the_orders_can_run_together_and_agree_on_the_messages(script, schedule, p, m):
    v = script.VIRTUAL[schedule]
    orders = [script.order(schedule, r, p, m) for r in range(p)]
    starts, sends = script.message_order(orders, p * v)   # raises if they wait forever
    assert len(sends) == 2 * m * (p * v - 1)               # every crossing, once
    assert all(len(st) == len(o) for st, o in zip(starts, orders))


@pytest.mark.parametrize("schedule,p,m", CASES)
def test_on_equal_stages_the_order_idles_what_its_formula_says(script, schedule, p, m):
    v = script.VIRTUAL[schedule]
    orders = [script.order(schedule, r, p, m) for r in range(p)]
    # any forward : backward; a split backward's B and W as long as a forward
    for f, b in ((1.0, 2.0), (1.0, 1.0)) if schedule != "ZB-H1" else ((1.0, 1.0),):
        ran = replay(orders, lambda k, s: f if k == "F" else b, p * v)
        assert bubble_of(ran) == pytest.approx(S.bubble(schedule, p, m, v), abs=1e-9)
        # and each rank holds the micro-batches the planner says
        saved = {s: 1.0 for s in range(p * v)}
        for rank, events in enumerate(ran):
            held, _ = in_flight(events, saved)
            assert held == round(v * S.in_flight(schedule, p, m, rank, v))


def test_a_mistaken_order_is_refused(script):
    orders = [script.order("1F1B", r, 2, 4) for r in range(2)]
    orders[1] = [("B", 1, 0)] + [x for x in orders[1] if x != ("B", 1, 0)]
    with pytest.raises(ValueError, match="not a valid schedule"):
        script.message_order(orders, 2)


@pytest.mark.slow
def test_launched_it_trains_every_schedule_to_the_whole_models_weights(tmp_path):
    run([sys.executable, "-m", "paddle.distributed.launch", "--log_level", "ERROR",
         "--nproc_per_node", "2", "--log_dir", "log", str(SCRIPTS / "schedules_paddle.py"),
         "--micro", "4", "--out", "s.json"], tmp_path, timeout=300)
    found = rows(json.loads((tmp_path / "s.json").read_text()))
    assert [r.schedule for r in found] == ["GPipe", "1F1B", "Interleaved 1F1B", "ZB-H1"]
    for r in found:
        assert r.weight_diff <= 1e-4
        assert r.equal == pytest.approx(r.formula, abs=1e-9)
        assert r.in_flight == [round(r.virtual * S.in_flight(r.schedule, 2, 4, k))
                               for k in range(2)]
        assert all(0 < b < 1 for b in r.bubbles) and len(r.bubbles) == 2
        assert all(b > 0 for b in r.in_flight_bytes)
