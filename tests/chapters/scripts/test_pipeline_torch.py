"""The sharding chapter's PyTorch pipeline script, started with torchrun on 2 gloo ranks:
both schedules run their passes in their order, hold what they promise and train the
two stages to the whole model's weights."""
from __future__ import annotations

import json

import pytest

from grader.lab.sharding import measure as shard_measure

from ._run import BIN, SCRIPTS, run

pytestmark = pytest.mark.slow
SCRIPT = str(SCRIPTS / "pipeline_torch.py")


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("pipe")
    run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", SCRIPT,
         "--micro", "2,4", "--out", "pipe.json"], out, timeout=600)
    return json.loads((out / "pipe.json").read_text())


def test_both_schedules_train_to_the_whole_models_weights(launched):
    rows = shard_measure.pipeline_rows(launched)
    assert {(r.schedule, r.micro) for r in rows} == {
        (s, m) for s in ("GPipe", "1F1B") for m in (2, 4)}
    assert all(r.weight_diff <= 1e-4 for r in rows)


def test_the_passes_run_in_each_schedules_order(launched):
    order = {(e[0]["schedule"], e[0]["micro"], s): [f"{k}{c}" for k, c, *_ in r["steps"][-1]]
             for e in launched["runs"] for s, r in enumerate(e)}
    assert order[("GPipe", 4, 0)] == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]
    assert order[("1F1B", 4, 0)] == ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]
    assert order[("1F1B", 4, 1)] == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]


def test_1f1b_holds_fewer_micro_batches_than_gpipe(launched):
    for r in shard_measure.pipeline_rows(launched):
        want = [r.micro] * 2 if r.schedule == "GPipe" else [2, 1]
        assert r.in_flight == want


def test_the_bubble_is_measured_on_the_runs_own_timeline(launched):
    for r in shard_measure.pipeline_rows(launched):
        assert all(0 < b < 1 for b in r.bubbles)
        assert len(r.bubbles) == len(r.times) >= 2
