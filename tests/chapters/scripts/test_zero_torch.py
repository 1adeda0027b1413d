"""The sharding chapter's PyTorch ZeRO script, started with torchrun on 2 and 4 gloo
ranks as the page starts it: every strategy trains to the one-process weights, memory
per rank falls as ZeRO's stages say, and each stage runs the collectives it should."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from ._run import BIN, SCRIPTS, run

pytestmark = pytest.mark.slow
SCRIPT = str(SCRIPTS / "zero_torch.py")
MODEL_BYTES = 215_808 * 4                  # TinyGPT's parameters, float32


@pytest.fixture(scope="module", params=[2, 4])
def launched(request, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp(f"zero{request.param}")
    p = run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node",
             str(request.param), SCRIPT, "--out", "zero.json"], out, timeout=600)
    assert "largest difference from one process" in p.stdout
    return json.loads((out / "zero.json").read_text())


def _runs(result: dict) -> dict:
    return {r["strategy"]: r for r in result["runs"]}


def test_every_strategy_trains_to_the_one_process_weights(launched):
    for r in launched["runs"]:
        assert r["weight_diff"] <= 1e-4, r["strategy"]
        assert r["moved"] > 100 * r["weight_diff"], r["strategy"]   # it did train


def test_memory_per_rank_falls_as_zeros_stages_predict(launched):
    n = launched["world"]
    runs = _runs(launched)
    for r in runs.values():                  # every rank holds the same amounts, but
        first = r["memory_per_rank"][0]      # ZeRO-1's whole tensors: shares about equal
        for m in r["memory_per_rank"][1:]:
            assert {k: m[k] for k in ("params", "grads", "activations")} == \
                {k: first[k] for k in ("params", "grads", "activations")}, r["strategy"]
            assert m["optimizer"] == pytest.approx(first["optimizer"], rel=0.05)
    mem = {k: r["memory"] for k, r in runs.items()}
    assert mem["DP"]["params"] == mem["DP"]["grads"] == MODEL_BYTES
    assert mem["DP"]["optimizer"] == pytest.approx(2 * MODEL_BYTES, abs=4096)
    assert mem["ZeRO-1"]["optimizer"] == pytest.approx(2 * MODEL_BYTES / n, rel=0.02)
    assert mem["ZeRO-1"]["grads"] == MODEL_BYTES
    for stage in ("ZeRO-2", "ZeRO-3"):
        assert mem[stage]["grads"] == MODEL_BYTES / n
        assert mem[stage]["optimizer"] == pytest.approx(2 * MODEL_BYTES / n, abs=4096)
    # fully_shard without resharding holds the gathered model and its shards at the peak
    assert mem["ZeRO-2"]["params"] == MODEL_BYTES + MODEL_BYTES / n
    # with resharding: its shard, plus the blocks gathered at the time (fewer than all)
    assert MODEL_BYTES / n < mem["ZeRO-3"]["params"] < MODEL_BYTES
    acts = {m["activations"] for m in mem.values()}
    assert len(acts) == 1                    # the same rows per rank, whatever the stage


def test_each_stage_runs_the_collectives_it_should(launched):
    n = launched["world"]
    ops = {k: Counter(op for op, _, _ in r["collectives"]) for k, r in
           _runs(launched).items()}
    assert ops["DP"] == {"allreduce": 1}
    assert ops["ZeRO-1"] == {"allreduce": 1, "broadcast": n}
    units = 7                                # embedding, 4 blocks, head, the root's norm
    assert ops["ZeRO-2"] == {"allgather_base": units, "reduce_scatter_base": units}
    assert ops["ZeRO-3"] == {"allgather_base": 2 * units, "reduce_scatter_base": units}
    gathered = sum(s for op, s, _ in _runs(launched)["ZeRO-2"]["collectives"]
                   if op == "allgather_base")
    assert gathered == MODEL_BYTES           # one gather of every parameter


def test_the_2d_mesh_shards_in_pairs_and_reduces_across_them(launched):
    if launched["world"] < 4:
        assert "2-D" not in _runs(launched)
        return
    run2d = _runs(launched)["2-D"]
    assert {(op, ranks) for op, _, ranks in run2d["collectives"]} == {
        ("allgather_base", 2), ("reduce_scatter_base", 2), ("allreduce", 2)}
    assert run2d["memory"]["grads"] == MODEL_BYTES / 2


def test_the_run_times_its_steps_and_a_few_collectives_for_the_planner(launched):
    assert len(launched["ref_times"]) >= 2
    assert {s["op"] for s in launched["sweep"]} == {"all_reduce", "all_gather"}
    assert all(s["s"] > 0 for s in launched["sweep"])
