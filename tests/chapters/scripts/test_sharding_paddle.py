"""The sharding chapter's Paddle scripts, started with python -m
paddle.distributed.launch on 2 gloo ranks as the page starts them: what fails on CPU
ranks says so with Paddle's own error, and what runs trains to the one-process weights."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from grader.lab.core import paddle_log

from grader.lab.sharding import measure as shard_measure

from ._run import SCRIPTS, run

pytestmark = pytest.mark.slow
LAUNCH = ["python", "-m", "paddle.distributed.launch", "--log_level", "ERROR",
          "--nproc_per_node", "2"]
MODEL_BYTES = 215_808 * 4


@pytest.fixture(scope="module")
def zero(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("pz")
    run(LAUNCH + ["--log_dir", "log", str(SCRIPTS / "zero_paddle.py"), "--all",
                  "--out", "pz.json"], out, timeout=600)
    return (json.loads((out / "pz.json").read_text()),
            paddle_log.script_output(out / "log" / "workerlog.0"))


@pytest.fixture(scope="module")
def pipe(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("pp")
    run(LAUNCH + ["--log_dir", "log", str(SCRIPTS / "pipeline_paddle.py"), "--micro",
                  "2,4", "--out", "pp.json"], out, timeout=600)
    return (json.loads((out / "pp.json").read_text()),
            paddle_log.script_output(out / "log" / "workerlog.0"))


def test_the_sharding_apis_that_need_gpus_say_why(zero):
    _, log = zero
    for stage in (1, 2, 3):
        line = next(l for l in log.splitlines()
                    if l.startswith(f"dist.shard_optimizer, ShardingStage{stage}"))
        assert "CReduceScatterOp" in line
    assert log.count("group_sharded_parallel only support gpu") == 3


def test_fleets_zero1_trains_to_the_one_process_weights_with_half_the_state(zero):
    result, _ = zero
    runs = {r["strategy"]: r for r in result["runs"]}
    for r in runs.values():
        assert r["weight_diff"] <= 1e-4 and r["moved"] > 100 * r["weight_diff"]
    dp, z1 = runs["DP"]["memory"], runs["ZeRO-1"]["memory"]
    assert dp["params"] == z1["params"] == dp["grads"] == MODEL_BYTES
    assert z1["optimizer"] == pytest.approx(dp["optimizer"] / 2, rel=0.02)
    ops = Counter(op for op, _, _ in runs["ZeRO-1"]["collectives"])
    assert ops["reduce"] == ops["broadcast"] == 49        # one per parameter tensor
    assert shard_measure.sent_bytes(runs["ZeRO-1"]["collectives"]) == MODEL_BYTES


def test_fleets_pipeline_says_what_stops_it_on_cpu_ranks(pipe):
    _, log = pipe
    assert "fleet PipelineLayer, as installed: AttributeError" in log
    assert "does not support send with sync_op and use_calc_stream" in log


def test_the_hand_written_schedules_train_to_the_whole_models_weights(pipe):
    result, _ = pipe
    rows = shard_measure.pipeline_rows(result)
    assert len(rows) == 4 and all(r.weight_diff <= 1e-4 for r in rows)
    for r in rows:
        assert r.in_flight == ([r.micro] * 2 if r.schedule == "GPipe" else [2, 1])
