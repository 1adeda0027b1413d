"""The planner's pipeline schedules (planner.schedules): their bubble and activations
in flight, and what a plan naming one predicts beside 1F1B's."""
from __future__ import annotations

import pytest

from grader.lab import planner as P
from grader.lab.planner import schedules as S

MODEL = P.Transformer(vocab=128, width=64, heads=4, blocks=4, seq=32, batch=16)


def cluster(n: int) -> P.Cluster:
    return P.calibrated_cluster(n, 1e9, 1e9, 1e-5, 2**40)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 32)])
def test_gpipe_and_1f1b_keep_the_planners_old_bubble(p, m):
    assert S.bubble("GPipe", p, m) == S.bubble("1F1B", p, m) == \
        pytest.approx(P.bubble_fraction(p, m))


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8)])
def test_each_new_schedule_shrinks_the_bubble(p, m):
    one = S.bubble("1F1B", p, m)
    inter = S.bubble("Interleaved 1F1B", p, m)
    assert inter == pytest.approx((p - 1) / (2 * m + p - 1)) and inter < one
    assert S.bubble("ZB-H1", p, m) == pytest.approx((p - 1) / (3 * m + p - 1))
    assert S.bubble("ZBV zero bubble", p, m) < S.bubble("ZB-H1", p, m)
    # a weight gradient as long as forward and B together leaves nothing idle
    assert S.bubble("ZB-H1", p, m, f=1, b=1, w=2) == 0.0


def test_a_plan_naming_a_new_schedule_is_priced_by_it():
    c = cluster(2)
    old = P.predict_plan(MODEL, P.Plan(pp=2, micro=4, schedule="1F1B"), c)
    inter = P.predict_plan(MODEL, P.Plan(pp=2, micro=4, schedule="Interleaved 1F1B"), c)
    zb = P.predict_plan(MODEL, P.Plan(pp=2, micro=4, schedule="ZB-H1"), c)
    assert inter.terms["compute"] < old.terms["compute"]
    assert inter.terms["pp transfers"] == pytest.approx(2 * old.terms["pp transfers"])
    # rank 0 holds 5 half-stages (2.5 stages' worth) against 1F1B's 2; ZB-H1 holds 3
    acts = old.memory_terms["activations"]
    assert inter.memory_terms["activations"] == pytest.approx(acts * 2.5 / 2)
    assert zb.memory_terms["activations"] == pytest.approx(acts * 3 / 2)


def test_a_schedule_needing_more_stages_than_blocks_is_refused():
    with pytest.raises(ValueError, match="do not split into 8 stages"):
        P.predict_plan(MODEL, P.Plan(pp=4, micro=4, schedule="Interleaved 1F1B"),
                       cluster(4))
    with pytest.raises(ValueError, match="use one of"):
        P.predict_plan(MODEL, P.Plan(pp=2, micro=4, schedule="2F2B"), cluster(2))
