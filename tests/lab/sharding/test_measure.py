"""Reading the sharding scripts' results back: memory rows against the planner, the
calibration, the pipelines' bubble and micro-batches in flight, and the figures and
tables drawn from them (inputs built here, in the scripts' format)."""
import matplotlib
import pytest

matplotlib.use("Agg")

from grader.lab import planner as P  # noqa: E402
from grader.lab.sharding import measure as M  # noqa: E402
from grader.lab.sharding import tables as T  # noqa: E402
from grader.lab.sharding.figures import bubble_figure, memory_figure, pipeline_figure  # noqa: E402

WHOLE = M.MODEL.params * 4


def zero_run(world=2):
    def run(strategy, params, grads, opt, colls, times):
        mem = {"params": params, "grads": grads, "optimizer": opt, "activations": 5e6}
        return {"strategy": strategy, "memory": mem, "memory_per_rank": [mem] * world,
                "collectives": colls, "times": times, "weight_diff": 1e-7,
                "moved": 1e-2, "loss_diff": 1e-7}
    n = world
    return {"world": n, "ref_times": [0.2, 0.22],
            "sweep": [{"op": "all_reduce", "ranks": n, "bytes": b, "s": 1e-4 + b / 1e9}
                      for b in (2**14, 2**17, 2**20)]
            + [{"op": "all_gather", "ranks": n, "bytes": b, "s": 1e-4 + b / 2e9}
               for b in (2**14, 2**17, 2**20)],
            "runs": [run("DP", WHOLE, WHOLE, 2 * WHOLE, [("allreduce", WHOLE, n)],
                         [0.3, 0.31]),
                     run("ZeRO-1", WHOLE, WHOLE, 2 * WHOLE / n,
                         [("allreduce", WHOLE, n)] + [("broadcast", WHOLE / n, n)] * n,
                         [0.32, 0.33])]}


def test_memory_rows_take_the_busiest_rank_and_the_planners_prediction():
    rows = M.memory_rows(zero_run())
    assert [r.strategy for r in rows] == ["DP", "ZeRO-1"]
    dp, z1 = rows
    assert dp.measured["params"] == WHOLE and dp.predicted["params"] == WHOLE
    assert z1.predicted["optimizer"] == pytest.approx(WHOLE)
    assert dp.sent == pytest.approx(WHOLE) == dp.predicted_sent   # 2 (p-1)/p on 2 ranks
    assert z1.sent == pytest.approx(1.5 * WHOLE) == pytest.approx(z1.predicted_sent)
    assert dp.error("params") == 0


def test_the_calibration_makes_data_parallel_exact_and_predicts_the_others():
    run = zero_run()
    cluster, fit = M.calibrate(run)
    assert fit.bandwidth > 0 and cluster.overhead >= 0
    dp = P.predict_plan(M.MODEL, P.Plan(dp=2), cluster).step_s
    assert dp == pytest.approx(0.305, rel=1e-6)                 # the median DP step
    text = T.prediction_table(M.memory_rows(run, cluster), {"DP": dp, "ZeRO-1": dp})
    assert "calib." in text and "ZeRO-1" in text


def pipe_run():
    def stage(s, schedule, micro):
        t, events = 0.0, []
        order = ([("F", i) for i in range(micro)] + [("B", i) for i in range(micro)]
                 if schedule == "GPipe" or s == 0 else
                 [x for i in range(micro) for x in (("F", i), ("B", i))])
        for kind, mb in order:
            events.append([kind, mb, t + s, t + s + (1 if kind == "F" else 2)])
            t += 3
        return {"schedule": schedule, "micro": micro, "steps": [events, events],
                "times": [1.0, 1.1], "weight_diff": 1e-7}
    return {"runs": [[stage(s, sched, m) for s in range(2)]
                     for m in (2, 4) for sched in ("GPipe", "1F1B")]}


def test_pipeline_rows_measure_the_bubble_and_the_micro_batches_in_flight():
    rows = M.pipeline_rows(pipe_run())
    gpipe4 = next(r for r in rows if (r.schedule, r.micro) == ("GPipe", 4))
    assert gpipe4.in_flight == [4, 4] and gpipe4.formula == pytest.approx(0.2)
    assert 0 < gpipe4.bubble < 1 and len(gpipe4.bubbles) == 2
    one = next(r for r in rows if (r.schedule, r.micro) == ("1F1B", 4))
    assert one.in_flight == [4, 1]
    assert "GPipe" in T.pipeline_table({"PyTorch": rows})


def test_the_figures_draw_a_panel_per_run_and_schedule():
    rows = M.memory_rows(zero_run())
    fig = memory_figure({"A": rows, "B": rows})
    assert len(fig.axes) == 2
    assert len(pipeline_figure(pipe_run(), micro=4).axes) == 2
    with pytest.raises(ValueError, match="no schedule with 3"):
        pipeline_figure(pipe_run(), micro=3)
    fig = bubble_figure({"PyTorch": M.pipeline_rows(pipe_run())})
    assert len(fig.axes[0].get_legend().get_texts()) == 3     # 2 schedules + formula


def test_the_collectives_table_groups_by_kind_and_group_size():
    text = T.collectives_table(zero_run(4))
    assert "broadcast" in text and "4 x" in text
    assert "none recorded" in T.collectives_table(
        {"runs": [{"strategy": "DP", "collectives": []}]})


def test_the_explorer_prints_its_default_table_outside_jupyterlab(capsys, monkeypatch):
    from grader.lab.sharding.explorer import explorer

    monkeypatch.setenv("COURSE_BOOK_BUILD", "1")
    assert explorer(M.MODEL, P.calibrated_cluster(4, 1e9, 1e9, 1e-5, 2**30)) is None
    out = capsys.readouterr().out
    assert "choice:" in out and "appears when this notebook runs in JupyterLab" in out


def test_the_stages_imbalance_is_read_from_the_timelines_and_worded():
    from grader.lab.sharding.measure import PipeRow, imbalance_sentence

    row = lambda busy: PipeRow("1F1B", 4, 2, [0.3], [2, 1], [1.0], 0.0, busy)  # noqa: E731
    assert row([1.0, 2.0]).imbalance == 2.0
    uneven = imbalance_sentence([row([1.0, 2.0]), row([1.0, 1.8])])
    assert "1.80 to 2.00 times as long" in uneven and "equal stages" in uneven
    even = imbalance_sentence([row([1.0, 1.02])])
    assert "does not explain" in even and "times as long as the other" not in even
    assert "unknown" in imbalance_sentence([row([])])
