"""The planner's collectives, costs and choices, against hand-computed cases and, on 2 ranks,
against the collectives a run actually makes."""
import numpy as np
import pytest

from grader.lab import planner as P

F = 4  # bytes per float32


def ops(plan):
    return [(c.op, c.where, c.size) for c in plan]


def test_column_then_row_needs_one_forward_all_reduce_of_the_output():
    # Megatron's MLP: the hidden layer stays split; only the output is summed
    plan = P.comm_plan([8, 16, 4], ["col", "row"], batch=32, tp=2)
    assert ops(plan) == [("all_reduce", "fwd after layer 1", 32 * 4 * F)]
    assert P.comm_bytes([(8, 16), (16, 4)], ["col", "row"], 32) == 2 * (1 / 2) * 32 * 4 * F


def test_replicated_layers_need_no_communication_inside_a_tp_group():
    assert P.comm_plan([8, 16, 4], ["R", "R"], batch=32, tp=2) == []


def test_two_column_layers_gather_forward_and_reduce_scatter_backward():
    plan = P.comm_plan([8, 16, 4], ["col", "col"], batch=32, tp=2)
    assert ops(plan) == [("all_gather", "fwd after layer 0", 32 * 16 * F),
                         ("all_gather", "fwd after layer 1", 32 * 4 * F),
                         ("reduce_scatter", "bwd into layer 0", 32 * 16 * F)]


def test_a_row_layer_after_a_replicated_one_sums_forward_and_gathers_backward():
    # R then row: forward slices for free, sums the output; backward: row's input grad is
    # split, the R layer needs it whole -> all-gather
    plan = P.comm_plan([8, 16, 4], ["R", "row"], batch=32, tp=2)
    assert ops(plan) == [("all_reduce", "fwd after layer 1", 32 * 4 * F),
                         ("all_gather", "bwd into layer 0", 32 * 16 * F)]


def test_data_parallel_all_reduces_every_gradient_once():
    plan = P.comm_plan([8, 16, 4], ["R", "R"], batch=32, tp=1, dp=4)
    assert ops(plan) == [("all_reduce", "dp gradients", (8 * 16 + 16 * 4) * F)]
    assert plan[0].sent == pytest.approx(2 * 3 / 4 * (8 * 16 + 16 * 4) * F)


def test_ring_bytes_and_time_follow_the_alpha_beta_model():
    assert P.ring_bytes("all_gather", 800, 4) == 600
    assert P.ring_bytes("all_reduce", 800, 4) == 1200
    assert P.ring_bytes("all_reduce", 800, 1) == 0
    t = P.collective_time("all_reduce", 1000, 2, bandwidth=100, latency=0.5)
    assert t == pytest.approx(2 * 0.5 + 1000 / 100)


def test_fit_link_recovers_latency_and_bandwidth():
    lat, bw = 1e-4, 2e9
    samples = [(n, 2 * lat + n / bw) for n in (4096, 2**16, 2**20, 2**23)]
    got_lat, got_bw = P.fit_link(samples, p=2)
    assert got_lat == pytest.approx(lat, rel=1e-6) and got_bw == pytest.approx(bw, rel=1e-6)


def test_predicted_compute_is_flops_over_rate():
    c = P.Cluster("toy", 2, flops=1e9, memory=1e12, bandwidth=1e9, latency=0.0)
    pred = P.predict([8, 16, 4], 32, P.Strategy(1, 2, ("col", "row")), c)
    flops = (2 * 2 * 32 * 8 * 16 + 3 * 2 * 32 * 16 * 4) / 2   # first layer: no input grad
    assert pred.compute_s == pytest.approx(flops / 1e9)
    assert pred.comm_s == pytest.approx(32 * 4 * F / 1e9)
    assert pred.memory == pytest.approx(2 * (8 * 16 + 16 * 4) / 2 * F + 32 * 8 * F + 32 * 8 * F)


def test_enumeration_covers_every_degree_split_and_placement():
    strategies = list(P.enumerate_strategies([8, 16, 4], 32, 4))
    assert {(s.dp, s.tp) for s in strategies} == {(4, 1), (2, 2), (1, 4)}
    assert sum(s.tp == 2 for s in strategies) == 9          # 3 placements ** 2 layers
    assert all(s.placements == ("R", "R") for s in strategies if s.tp == 1)


def test_strategies_that_do_not_divide_are_skipped():
    strategies = list(P.enumerate_strategies([6, 9, 4], 6, 4))   # 9 is not split by 2 or 4
    assert all(not (s.tp > 1 and s.placements[0] == "col") for s in strategies)
    assert all(s.dp != 4 for s in strategies)                   # batch 6 does not split by 4


def test_the_planner_prefers_data_parallel_on_fast_links_and_no_split_on_slow_ones():
    dims, batch = [256, 256, 256], 4096   # big batch, small weights: dp moves little
    fast = P.Cluster("fast", 2, 1e12, 1e12, bandwidth=1e12, latency=0.0)
    best, _ = P.best_strategy(dims, batch, fast)
    assert best.strategy.dp == 2
    slow = P.Cluster("slow", 2, 1e15, 1e12, bandwidth=1e3, latency=1.0)
    best, _ = P.best_strategy(dims, batch, slow)
    assert best.comm_s == 0 and best.strategy.dp == 1   # nothing is worth communicating


def test_a_strategy_that_does_not_fit_is_not_chosen():
    dims, batch = [1024, 1024, 1024], 64
    weights = 2 * 1024 * 1024 * F
    # room for half the weights (+ grads) but not all: only a split layer fits
    c = P.Cluster("small", 2, 1e12, memory=weights * 2 * 0.6 + 1e6, bandwidth=1e9, latency=0)
    best, preds = P.best_strategy(dims, batch, c)
    assert best.fits and best.strategy.tp == 2 and "R" not in best.strategy.placements
    assert any(not p.fits for p in preds)


def test_bad_placements_are_rejected_with_a_message():
    with pytest.raises(ValueError, match="placements"):
        P.comm_plan([8, 16, 4], ["col"], 32)
    with pytest.raises(ValueError, match="unknown placement"):
        P.comm_plan([8, 16, 4], ["col", "diag"], 32)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_the_collectives_a_run_makes_are_the_planned_ones_and_it_trains_like_one_device(framework):
    from grader.lab import launch
    from grader.lab.plan_exec import mlp_numpy_reference, mlp_step_rank

    dims, batch, steps = [16, 32, 32, 8], 16, 2
    strategies = [(2, 1, ("R", "R", "R")), (1, 2, ("col", "row", "R")),
                  (1, 2, ("row", "col", "col")), (1, 2, ("R", "col", "row"))]
    runs = launch(mlp_step_rank, nprocs=2, framework=framework,
                  args=(dims, batch, strategies, steps), backend="gloo", timeout=120)
    ref = mlp_numpy_reference(dims, batch, steps + 1)
    for rank_runs in runs:
        for run in rank_runs:
            dp, tp, pl = run["strategy"]
            planned = sorted((c.op, c.size) for c in P.comm_plan(dims, pl, batch, tp, dp))
            seen = sorted((op, size) for op, _, size in run["collectives"])
            assert seen == planned, run["strategy"]
            for got, want in zip(run["weights"], ref["weights"]):
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
