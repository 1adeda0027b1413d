"""The planner against measurements read back from the chapter scripts' results."""
import pytest

from grader.lab.auto_parallel import measure as M
from grader.lab import planner as P

DIMS, BATCH = [8, 16, 16, 4], 32


def sweep(lat=1e-4, bw=1e9):
    rows = [{"op": op, "ranks": p, "bytes": n, "s": P.collective_time(op, n, p, bw, lat)}
            for op in ("all_reduce", "all_gather") for p in (2, 4)
            for n in (4096, 2**16, 2**20)]
    return {"world": 4, "rows": rows}


def runs(unsplit=0.01, overhead=0.002):
    flops = P.compute_flops(DIMS, BATCH, P.Strategy(1, 1, ("R", "R", "R")))
    cluster = P.calibrated_cluster(4, flops / unsplit, 1e9, 1e-4, 1e12, overhead)
    plans = []
    for plan in ("4x1:R,R,R", "1x4:R,R,R", "1x4:col,row,R", "2x2:col,row,R"):
        s = P.Strategy.parse(plan)
        t = P.predict(DIMS, BATCH, s, cluster, dp_sync="per_weight").step_s
        plans.append({"plan": plan, "step_s": [t * 1.1, t, t * 1.3],
                      "unsplit_step_s": [unsplit] * 3,
                      "collectives": M.planned_collectives(DIMS, BATCH, s)})
    return {"world": 4, "dims": DIMS, "batch": BATCH, "plans": plans}


def test_calibration_recovers_the_link_the_rate_and_the_overhead():
    cluster, fit = M.calibrate(sweep(), runs())
    assert fit.latency == pytest.approx(1e-4) and fit.bandwidth == pytest.approx(1e9)
    flops = P.compute_flops(DIMS, BATCH, P.Strategy(1, 1, ("R", "R", "R")))
    assert cluster.flops == pytest.approx(flops / 0.01)
    assert cluster.overhead == pytest.approx(0.002)


def test_without_the_replicated_plan_there_is_no_overhead_to_measure():
    r = runs()
    r["plans"] = [p for p in r["plans"] if p["plan"] != "1x4:R,R,R"]
    cluster, _ = M.calibrate(sweep(), r)
    assert cluster.overhead == 0


def test_a_model_that_fits_its_runs_predicts_them_and_orders_them_alike():
    cluster, _ = M.calibrate(sweep(), runs())
    rows = M.compare(runs(), cluster)
    assert all(r.error == pytest.approx(0, abs=1e-9) for r in rows)
    assert all(r.as_planned for r in rows)
    assert [r.calibrates for r in rows] == [False, True, False, False]
    s = M.summary(rows)
    assert s.spearman == pytest.approx(1) and s.place_of_predicted == 1
    assert s.median_abs_error == pytest.approx(0, abs=1e-9) and s.not_as_planned == []
    assert "(calib.)" in M.table(rows)


def test_collectives_other_than_planned_are_reported_by_plan():
    r = runs()
    r["plans"][2]["collectives"] = {"forward": {"all_reduce": 1},
                                    "backward": {"reduce_scatter_tensor": 1,
                                                 "all_gather_into_tensor": 1},
                                    "optimizer step": {}}
    cluster, _ = M.calibrate(sweep(), r)
    rows = M.compare(r, cluster)
    assert rows[2].as_planned is False
    assert M.summary(rows).not_as_planned == ["1x4:col,row,R"]
    assert M.table(rows).splitlines()[3].endswith("no")


def test_counts_from_a_log_are_used_when_the_run_has_none():
    r = runs()
    for p in r["plans"]:
        del p["collectives"]
    cluster, _ = M.calibrate(sweep(), r)
    observed = {"4x1:R,R,R": {"forward": {}, "backward": {"all_gather": 1},
                              "optimizer step": {"all_reduce": 3}}}
    rows = M.compare(r, cluster, observed)
    assert rows[0].as_planned is False and rows[1].as_planned is None


def test_a_missing_result_file_says_which_cell_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="launch command"):
        M.load(tmp_path / "2d.json")


def test_the_fit_sentence_says_how_well_the_line_fits_or_that_nothing_fits():
    from tests.lab.planner.test_collectives import FLAT_SWEEP, _sweep

    good = M.fit_sentence("PyTorch", P.fit_alpha_beta(_sweep(1e-4, 2e9)))
    assert good.startswith("One latency and one bandwidth explain PyTorch's collectives well")
    assert "median of 0 %" in good
    flat = M.fit_sentence("Paddle", P.fit_alpha_beta(FLAT_SWEEP))
    assert flat.startswith("No bandwidth explains Paddle's collectives") and "well" not in flat
    assert "4 KiB to 1 MiB" in flat and "latency alone" in flat


def test_the_order_sentence_follows_the_rank_correlation_and_words_no_order():
    assert M.order_sentence(0.9).startswith("is close to the measured order")
    assert "0.90" in M.order_sentence(0.9)
    assert M.order_sentence(-0.5).startswith("is closer to the reverse")
    nan = M.order_sentence(P.rank_correlation([1, 2, 3], [5, 5, 5]))
    assert nan.startswith("cannot be compared") and "reverse" not in nan


def test_a_flat_sweep_from_a_busy_machine_still_calibrates_compares_and_draws():
    """The page's whole path on the sweep that failed a clean build (issue 24)."""
    import matplotlib
    matplotlib.use("Agg")
    from grader.lab.auto_parallel.figures import prediction_figure, sweep_figure
    from tests.lab.planner.test_collectives import FLAT_SWEEP

    flat = {"world": 4, "rows": [{"op": op, "ranks": p, "bytes": n, "s": s}
                                 for op, p, n, s in FLAT_SWEEP]}
    cluster, fit = M.calibrate(flat, runs())
    assert not fit.ok and "latency only" in cluster.describe()
    rows = M.compare(runs(), cluster)
    s = M.summary(rows)
    assert s.median_abs_error == s.median_abs_error
    assert M.order_sentence(s.spearman)
    sweep_figure({"PyTorch": fit})
    prediction_figure({"PyTorch": rows})
