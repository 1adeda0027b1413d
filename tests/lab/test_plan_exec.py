"""Reading a plan's runs: the calibrated cluster and the predicted-vs-measured rows."""
import pytest

from grader.lab import planner as P
from grader.lab.plan_exec import calibrated, compare

DIMS, BATCH = [8, 16, 4], 32


def _cal(rate=1e9, lat=1e-4, bw=1e9):
    flops = 2 * BATCH * 8 * 16 * 2 + 2 * BATCH * 16 * 4 * 3
    sizes = [4096, 2**16, 2**20]
    return {"matmuls": [], "step": {"s": flops / rate, "flops": flops},
            "all_reduce": [{"bytes": n, "s": 2 * lat + n / bw} for n in sizes]}


def test_calibrated_cluster_takes_the_step_rate_and_the_fitted_link():
    c = calibrated(_cal(), world=2, memory=1e9)
    assert c.n == 2 and c.flops == pytest.approx(1e9)
    assert c.latency == pytest.approx(1e-4) and c.bandwidth == pytest.approx(1e9)


def test_compare_reports_the_error_and_whether_the_collectives_were_the_planned_ones():
    c = calibrated(_cal(), world=2, memory=1e9)
    pl = ("col", "row")
    pred = P.predict(DIMS, BATCH, P.Strategy(1, 2, pl), c).step_s
    good = {"strategy": (1, 2, pl), "step_s": [2 * pred] * 3,
            "collectives": [("all_reduce", "fwd after layer 1", BATCH * 4 * 4)]}
    wrong = dict(good, collectives=[("all_gather", "fwd after layer 1", BATCH * 4 * 4)])
    text, rows = compare(DIMS, BATCH, [good, wrong], c)
    assert rows[0]["error"] == pytest.approx(-0.5) and rows[0]["bytes_match"]
    assert not rows[1]["bytes_match"] and text.splitlines()[-1].endswith("NO")
