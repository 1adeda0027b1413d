"""Checks of assignment a5_dependencies: correct schedules in PyTorch and Paddle get full
marks, each typical mistake loses the points it should with the first hint it should,
grading is repeatable; the simulated GPUs behave as the checks assume."""
import numpy as np
import pytest

from grader.checks import a5_dependencies as public
from grader.sim import place, simulate

from . import a5_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks, namespace

a5 = hidden_checks("a5_dependencies")
CHECKS = [("check_result", "run_dag"), ("check_devices_used", "run_dag"),
          ("check_dependencies", "run_dag"), ("check_faster", "run_dag")]
globals().update(assignment_tests(a5, solutions, "a5_dependencies", CHECKS))


def test_the_one_device_baseline_is_slower_than_the_reference_by_more_than_a_tenth():
    ref = namespace("a5_dependencies", {})["run_dag"]
    assert a5.run(ref).makespan_s <= 0.9 * a5.serial_s()


def test_grade_runs_the_schedule_once_and_gives_all_four_results():
    ref = namespace("a5_dependencies", {})
    results = a5.check_all(ref["run_dag"], ref["FRAMEWORK"])
    assert [r.points for r in results] == [3, 2, 2, 3]
    assert public.public_run_dag(ref["run_dag"], ref["FRAMEWORK"]).passed


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_a_tensor_of_the_other_device_raises_by_default_and_is_recorded_on_request(framework):
    names = public.device_names(framework)
    fw, m = simulate(framework, gpus=2)
    a, b = (place(fw, np.eye(4, dtype=np.float32), device=i) for i in (0, 1))
    with pytest.raises(RuntimeError, match="device|place"):
        a @ b
    fw, m = simulate(framework, gpus=2, wrong_device="record")
    a, b = (place(fw, np.eye(4, dtype=np.float32), device=i) for i in (0, 1))
    np.testing.assert_array_equal((a @ b).to(names[0]).cpu().numpy(), np.eye(4))
    assert [v.kind for v in m.violations] == ["wrong_device"]


def test_a_copy_between_devices_waits_for_the_work_of_both_and_the_host_does_not():
    torch, m = simulate("torch", gpus=2)
    x0, x1 = (place(torch, np.eye(256, dtype=np.float32), device=i) for i in (0, 1))
    y = x1 @ x1                                  # queued on device 1
    before = m.clock.now_ns
    y0 = y.to("cuda:0", non_blocking=True)
    assert m.clock.now_ns - before < 1e5         # the host went on
    copy = [o for o in m.ops if o.name == "p2p"][0]
    product = [o for o in m.ops if o.name == "matmul"][0]
    assert copy.start_ns >= product.end_ns       # after the product that made y
    np.testing.assert_array_equal(y0.cpu().numpy(), np.eye(256))
