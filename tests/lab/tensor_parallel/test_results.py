"""The layers page's helpers on runs built in memory: collectives read back and set
beside the planner's, and the words the page's sentences pick from numbers."""
import pytest

from grader.lab import tensor_parallel as layers
from grader.lab.planner.layers import LayerPlan, activation_bytes, collectives, param_bytes


def fake_run(how="TP", tp=2, dp=1, weight_diff=1e-5, moved=1e-2, extra=()) -> dict:
    run = {"how": how, "tp": tp, "dp": dp}
    plan = layers.plan_of(run)
    calls = {"forward": [], "backward": [], "optimizer": []}
    for phase, op, size, p in list(collectives(layers.MODEL, plan)) + list(extra):
        calls[phase].append([op, int(size), p])
    return {**run, "collectives": calls, "logits_diff": 1e-7, "grad_diff": 1e-8,
            "weight_diff": weight_diff, "moved": moved,
            "params": param_bytes(layers.MODEL, plan),
            "activations": activation_bytes(layers.MODEL, plan),
            "ref_activations": activation_bytes(layers.MODEL, LayerPlan(1)),
            "step_s": [0.1, 0.12], "ref_step_s": [0.05, 0.06]}


def test_what_a_run_counted_is_compared_with_the_planner():
    assert layers.counted(fake_run()) == layers.predicted(fake_run())
    odd = fake_run(extra=[("backward", "all_reduce", 1024, 2)])
    assert layers.counted(odd) != layers.predicted(odd)


def test_plans_are_read_from_the_run():
    assert layers.plan_of(fake_run("by hand")) == LayerPlan(2, vocab_parallel=False)
    assert layers.plan_of(fake_run("TP+SP", 4)) == LayerPlan(4, sp=True)
    assert layers.plan_of(fake_run("DP x TP+SP", 2, 2)) == LayerPlan(2, True, 2)


def test_collective_lines_name_every_phase():
    lines = layers.collective_lines(fake_run("by hand"))
    assert lines[0].strip() == "forward: 8 all_reduce of 128 KiB over 2"
    assert lines[2].strip() == "optimizer: none"


def test_prediction_rows_of_exact_accounting_have_no_memory_error():
    cluster = layers.calibrate({"world": 2, "runs": [fake_run()],
                                "sweep": [{"op": "all_reduce", "ranks": 2, "bytes": b,
                                           "s": 1e-4 + b / 1e9} for b in (2**14, 2**17)]})
    (row,) = layers.prediction_rows([fake_run()], cluster)
    assert row["same_collectives"]
    assert row["error"]["params"] == row["error"]["activations"] == 0
    assert row["error"]["sent"] == pytest.approx(0)
    assert "TP, tp 2" in layers.prediction_table([row])


def test_agreement_words_say_when_a_run_is_not_equal():
    agree = layers.agreement([fake_run(), fake_run(weight_diff=3e-5)])
    assert agree["weights"] == 3e-5
    assert layers.agreement_words(agree).startswith("equal to one process within 1e-04")
    bad = layers.agreement([fake_run(weight_diff=1e-2)])
    assert layers.agreement_words(bad).startswith("not equal")
    still = layers.agreement([fake_run(weight_diff=1e-5, moved=1e-4)])  # did not train
    assert layers.agreement_words(still).startswith("not equal")


@pytest.mark.parametrize("errors, words", [
    ([0.001, -0.002], "exactly (within 0.5 %)"),
    ([0.03, -0.01], "within 3 %"),
    ([-0.5, -0.8, 0.1], "off by a median of 50 %, and by 80 % at worst (the prediction "
                        "below the measurement)"),
    ([], "not compared (no run to compare with)")])
def test_error_words(errors, words):
    assert layers.error_words(errors) == words


def test_falls_words():
    assert layers.falls_words([3, 2, 1]) == "fall at every step"
    assert layers.falls_words([3, 3, 1]) == "never grow"
    assert layers.falls_words([3, 4, 1]) == "do not fall at every step"


def test_comm_debug_mode_is_compared_kind_by_kind():
    run = fake_run("TP+SP")
    run["comm_debug"] = {"forward": {"reduce_scatter_tensor": 9, "all_gather_into_tensor": 9,
                                     "all_reduce": 3},
                         "backward": {"reduce_scatter_tensor": 9,
                                      "all_gather_into_tensor": 9, "all_reduce": 18}}
    assert layers.comm_debug_agrees(run)
    run["comm_debug"]["backward"]["all_reduce"] = 0
    assert not layers.comm_debug_agrees(run)


def test_the_figure_draws_the_one_process_model_as_tp_1():
    runs = [fake_run("TP", 2), fake_run("TP", 4), fake_run("TP+SP", 2)]
    points = layers.activation_points(runs)
    assert sorted(points["TP"]) == [1, 2, 4] and sorted(points["TP+SP"]) == [1, 2]
    fig = layers.activation_figure(runs, "t")
    assert len(fig.axes[0].lines) == 4             # measured and planner, per way


def test_time_words_name_what_the_model_leaves_out_only_where_it_misses():
    assert layers.time_words([0.01, -0.02]) == "The step times are predicted within 2 %."
    far = layers.time_words([-0.8, -0.7])
    assert far.startswith("The step times are predicted off by a median of 75 %")
    assert "does not say which" in far


def test_memory_line_sets_each_measure_beside_the_planner():
    line = layers.memory_line(fake_run("by hand"))
    assert line.startswith("by hand, tp 2:\n  parameters 457 KiB (planner 457, +0.0 %)")
    assert "\n  sent 2048 KiB (planner 2048, +0.0 %)" in line
    assert max(len(x) for x in line.splitlines()) <= 100   # fits an output box
