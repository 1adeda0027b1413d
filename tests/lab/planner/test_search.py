"""The search, and the comparison of a predicted order with a measured one."""
import pytest

from grader.lab import planner as P


def cluster(n, flops, bw, lat, memory=1e12):
    return P.Cluster("c", n, flops, memory, P.Link("l", bw, lat))


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
    best, _ = P.best_strategy(dims, batch, cluster(2, 1e12, 1e12, 0.0))
    assert best.strategy.dp == 2
    best, preds = P.best_strategy(dims, batch, cluster(2, 1e15, 1e3, 1.0))
    # nothing is worth communicating: one device, not two repeating the same work
    assert best.comm_s == 0 and best.devices == 1 and str(best.strategy) == "dp=1 tp=1 [R R]"
    assert not [p for p in preds if p.strategy.tp > 1 and set(p.strategy.placements) == {"R"}]
    assert {p.devices for p in preds} == {1, 2}


def test_on_two_nodes_the_planner_keeps_tensor_parallelism_inside_the_fast_node():
    dims, batch = [4096] * 4, 4096
    best, preds = P.best_strategy(dims, batch, P.PRESETS["2 x 8 GPUs, Ethernet"])
    on_both = [p for p in preds if p.devices == 16]
    assert (on_both[0].strategy.dp, on_both[0].strategy.tp) == (2, 8)
    split_across = [p for p in on_both if p.strategy.tp == 16 and p.comm_s > 0]
    assert split_across and all(p.step_s > on_both[0].step_s for p in split_across)
    # and one node beats both when the all-reduce across the Ethernet costs more than the
    # second node saves: the search may leave devices out
    assert best.devices <= 8 and best.step_s < on_both[0].step_s


def test_a_strategy_that_does_not_fit_is_not_chosen():
    dims, batch = [1024, 1024, 1024], 64
    weights = 2 * 1024 * 1024 * 4
    c = cluster(2, 1e12, 1e9, 0, memory=weights * 2 * 0.6 + 1e6)
    best, preds = P.best_strategy(dims, batch, c)
    assert best.fits and best.strategy.tp == 2 and "R" not in best.strategy.placements
    assert any(not p.fits for p in preds)


def test_rank_correlation_is_one_for_the_same_order_and_minus_one_for_the_reverse():
    assert P.rank_correlation([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1)
    assert P.rank_correlation([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1)
    assert P.rank_correlation([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert P.rank_correlation([1, 1, 2], [1, 2, 3]) == pytest.approx(0.866, abs=1e-3)
    # equal measured times leave no order: NaN, which the page words; nothing raises
    rho = P.rank_correlation([1, 1], [1, 2])
    assert rho != rho
    with pytest.raises(ValueError):
        P.rank_correlation([1], [1])
