"""What each device of the stand-in holds at the end of backward, counted from tensors."""
import pytest

from grader.lab.core.devices import HostDevice
from grader.lab.data_parallel.phases import DataParallelTrainer
from grader.lab.data_parallel.problem import make_problem


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_device_0_holds_the_targets_and_gathered_outputs_on_top_of_a_replica(framework):
    problem = make_problem(batch=32, d_in=8, hidden=16, d_out=4)
    devices = [HostDevice("cpu", framework), HostDevice("cpu", framework)]
    trainer = DataParallelTrainer(devices, problem, track_memory=True)
    trainer.step(problem.x, problem.y)
    m0, m1 = trainer.memory()
    n_params = sum(w.size for w in problem.weights)
    assert m0["parameters"] == m1["parameters"] == 4 * n_params
    assert m0["gradients"] == m1["gradients"] == 4 * n_params
    assert m0["inputs"] == m1["inputs"] == 4 * 16 * 8            # 16 rows of 8 features each
    assert m0["targets"] == 4 * 32 * 4                            # the whole batch's targets
    assert m0["gathered outputs + their gradient"] == 2 * 4 * 32 * 4
    assert "targets" not in m1
    assert sum(m0.values()) > sum(m1.values())


def test_memory_is_not_counted_unless_asked():
    problem = make_problem(batch=8, d_in=4, hidden=4, d_out=2)
    trainer = DataParallelTrainer([HostDevice("cpu", "torch")] * 2, problem)
    trainer.step(problem.x, problem.y)
    with pytest.raises(RuntimeError, match="track_memory"):
        trainer.memory()


def test_plot_memory_stacks_one_bar_per_device():
    import matplotlib
    matplotlib.use("Agg")
    from grader.lab.data_parallel.memory import plot_memory

    ax = plot_memory([{"parameters": 2048, "inputs": 1024}, {"parameters": 2048}],
                     ["device 0", "device 1"])
    heights = {}
    for bar in ax.patches:
        heights[bar.get_x()] = heights.get(bar.get_x(), 0) + bar.get_height()
    assert sorted(heights.values()) == [2.0, 3.0]                # KiB per device
