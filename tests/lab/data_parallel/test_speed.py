"""The stand-in's speed comparison times each way of training the same batch."""
from grader.lab.core.devices import HostDevice
from grader.lab.data_parallel.problem import make_problem
from grader.lab.data_parallel.speed import compare


def test_compare_times_the_step_on_all_devices_on_one_and_a_plain_step():
    problem = make_problem(batch=16, d_in=8, hidden=8, d_out=2)
    times = compare([HostDevice("cpu", "torch"), HostDevice("cpu", "torch")], problem,
                    repeats=2)
    assert list(times) == ["2 devices", "1 device", "plain step"]
    assert all(s.median > 0 and len(s.samples) == 2 for s in times.values())
