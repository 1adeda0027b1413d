"""The cost model's terms: compute, communication on the right link, overhead, memory."""
import pytest

from grader.lab import planner as P

F = 4


def toy(n=2, **kw):
    kw.setdefault("intra", P.Link("toy", 1e9, 0.0))
    return P.Cluster("toy", n, flops=1e9, memory=1e12, **kw)


def test_predicted_compute_is_flops_over_rate_and_comm_the_alpha_beta_time():
    pred = P.predict([8, 16, 4], 32, P.Strategy(1, 2, ("col", "row")), toy())
    flops = (2 * 2 * 32 * 8 * 16 + 3 * 2 * 32 * 16 * 4) / 2   # first layer: no input grad
    assert pred.compute_s == pytest.approx(flops / 1e9)
    assert pred.comm_s == pytest.approx(32 * 4 * F / 1e9)
    assert pred.step_s == pytest.approx(sum(pred.terms.values()))


def test_memory_is_a_breakdown_of_weights_grads_optimizer_and_activations():
    pred = P.predict([8, 16, 4], 32, P.Strategy(1, 2, ("col", "row")), toy(), opt_states=2)
    w = (8 * 16 + 16 * 4) / 2 * F
    assert pred.memory_terms == pytest.approx(
        {"params": w, "grads": w, "optimizer": 2 * w, "activations": 32 * 8 * F + 32 * 8 * F})
    assert pred.memory == pytest.approx(sum(pred.memory_terms.values()))


def test_the_dp_all_reduce_crosses_nodes_when_the_replicas_are_in_different_nodes():
    link_in, link_out = P.Link("fast", 1e12, 0.0), P.Link("slow", 1e9, 0.0)
    c = P.Cluster("2 nodes", 4, 1e15, 1e12, link_in, inter=link_out, per_node=2)
    s = P.Strategy(2, 2, ("col", "row"))
    pred = P.predict([64, 64, 64], 64, s, c)
    grads = (64 * 64 * 2) // 2 * F
    assert pred.terms["dp communication"] == pytest.approx(grads / 1e9)   # 2 ranks: sends n
    assert pred.terms["tp communication"] == pytest.approx(32 * 64 * F / 1e12)


def test_a_measured_overhead_is_a_term_of_every_plan():
    c = toy(overhead=0.5)
    for s in P.enumerate_strategies([8, 16, 4], 32, 2):
        assert P.predict([8, 16, 4], 32, s, c).terms["overhead"] == 0.5


def test_a_strategy_for_another_device_count_is_refused():
    with pytest.raises(ValueError, match="devices"):
        P.predict([8, 16, 4], 32, P.Strategy(2, 2, ("R", "R")), toy())


def test_plans_are_spelled_as_the_scripts_spell_them():
    s = P.Strategy.parse("2x2:col,row,R")
    assert s == P.Strategy(2, 2, ("col", "row", "R")) and s.plan == "2x2:col,row,R"
    with pytest.raises(ValueError, match="DPxTP"):
        P.Strategy.parse("2,2:col")
