"""Semi-automatic sharding on 2 ranks: the collectives each framework inserts, observed,
and a column/row-split MLP that trains like the unsharded one."""
import pytest

from grader.lab import launch
from grader.lab import sharding as S

pytestmark = pytest.mark.slow
KIB = 1024


def test_sent_per_rank_follows_the_ring_model():
    assert S.sent_per_rank("all_gather_into_tensor", 64 * KIB, 128 * KIB, 2) == 64 * KIB
    assert S.sent_per_rank("AllReduce", 128 * KIB, 128 * KIB, 2) == 128 * KIB
    assert S.sent_per_rank("reduce_scatter_tensor", 128 * KIB, 64 * KIB, 2) == 64 * KIB
    assert S.sent_per_rank("Slice", 128 * KIB, 64 * KIB, 2) == 0


def test_torch_reshards_insert_the_expected_collectives_and_are_exact():
    cases = [("Shard(0)", "Replicate"), ("Partial", "Replicate"), ("Replicate", "Shard(0)"),
             ("Partial", "Shard(0)")]
    ranks = launch(S.reshard_rank, nprocs=2, framework="torch", args=(64, 32, cases),
                   backend="gloo", timeout=120)
    for rows in ranks:
        assert all(r["exact"] for r in rows)
        got = {(r["src"], r["dst"]): r["collectives"] for r in rows}
        full = 64 * 32 * 4
        assert got[("Shard(0)", "Replicate")] == [("all_gather_into_tensor", full // 2, full)]
        assert got[("Partial", "Replicate")] == [("all_reduce", full, full)]
        assert got[("Replicate", "Shard(0)")] == []
        assert got[("Partial", "Shard(0)")] == [("reduce_scatter_tensor", full, full // 2)]
        assert rows[0]["comm_debug_counts"] == {"all_gather_into_tensor": 1}


def test_paddle_reshards_are_exact_and_its_log_names_the_collective():
    cases = [("Shard(0)", "Replicate"), ("Partial", "Replicate"), ("Shard(0)", "Shard(1)")]
    ranks = launch(S.reshard_rank, nprocs=2, framework="paddle", args=(64, 32, cases),
                   env=S.PADDLE_LOG_ENV, backend="gloo", timeout=120)
    for rows in ranks:
        assert all(r["exact"] and r["log_seen"] for r in rows)
        got = {(r["src"], r["dst"]): [c[0] for c in r["collectives"]] for r in rows}
        assert got[("Shard(0)", "Replicate")] == ["AllGather"]
        assert got[("Partial", "Replicate")] == ["AllReduce"]
        assert "AllGather" in got[("Shard(0)", "Shard(1)")]  # no CPU all_to_all: via Replicate
        assert rows[0]["reshard_functions"] == ["SToRReshard"]


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_column_row_mlp_trains_like_the_unsharded_model(framework):
    env = S.PADDLE_LOG_ENV if framework == "paddle" else None
    ranks = launch(S.mlp_tp_rank, nprocs=2, framework=framework, env=env, backend="gloo",
                   timeout=120)
    for r in ranks:
        assert r["max_loss_diff"] <= 1e-5 and r["max_weight_diff"] <= 1e-5
        assert r["losses"][-1] < r["losses"][0]          # it did train
        # each rank holds half of each weight
        assert sorted(r["local_shapes"][0]) == [64, 64] and sorted(r["local_shapes"][1]) == [32, 64]
        assert len(r["collectives"]["forward"]) == 1     # one all-reduce of the output
