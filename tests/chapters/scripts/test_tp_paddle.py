"""The layers page's Paddle script on 2 gloo ranks, launched as the page launches it:
the by-hand split ends where one process does with one all-reduce per column-row pair
each way; fleet's layers either run and agree, or their error is recorded in words."""
from __future__ import annotations

import json
import sys

import pytest

from grader.lab import tensor_parallel as layers
from grader.lab.planner.layers import param_bytes

from ._run import SCRIPTS, run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("tpp")
    run([sys.executable, "-m", "paddle.distributed.launch", "--log_level", "ERROR",
         "--nproc_per_node", "2", "--log_dir", "log", str(SCRIPTS / "tp_paddle.py"),
         "--out", "tp.json"], out, timeout=600, PYTHONWARNINGS="ignore")
    return json.loads((out / "tp.json").read_text())


def test_the_hand_split_equals_one_process(launched):
    (mine,) = [r for r in launched["runs"] if r["how"] == "by hand"]
    assert mine["logits_diff"] <= 1e-5 and mine["grad_diff"] <= 1e-6
    assert mine["weight_diff"] <= 1e-4 < 100 * mine["weight_diff"] < mine["moved"]
    x = 16 * 32 * 64 * 4
    assert mine["collectives"] == {"forward": [["all_reduce", x, 2]] * 8,
                                   "backward": [["all_reduce", x, 2]] * 8}
    assert layers.counted(mine) == layers.predicted(mine)    # the planner's list
    assert mine["params"] == param_bytes(layers.MODEL, layers.plan_of(mine))
    assert mine["activations"] < mine["ref_activations"]


def test_fleets_layers_agree_or_say_why_not(launched):
    for how in ("fleet", "fleet SP"):
        ran = [r for r in launched["runs"] if r["how"] == how]
        if how == "fleet SP" and launched["sp_mlp"] is not None:
            assert launched["sp_mlp"]["output_diff"] <= 1e-5
        elif ran:
            assert ran[0]["weight_diff"] <= 1e-4
        else:
            assert launched["errors"][how]        # the framework's own message


def test_the_auto_parallel_plan_equals_one_process_or_says_why_not(launched):
    if launched["auto"] is None:
        assert launched["errors"]["auto"]
        return
    auto = launched["auto"]
    assert auto["logits_diff"] <= 1e-5
    assert auto["weight_diff"] <= 1e-4 < 100 * auto["weight_diff"] < auto["moved"]
    (mine,) = [r for r in launched["runs"] if r["how"] == "by hand"]
    assert auto["params"] == mine["params"]      # the same split of the same layers
