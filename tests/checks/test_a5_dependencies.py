"""Assignment 5's checks: correct schedules get full marks, typical wrong ones lose what they should."""
import numpy as np
import pytest

from grader.checks import a5_dependencies as a5_public
from grader.checks.a5_vdevices import VRef, virtual_devices
from tests.checks import a5_solutions as sol
from tests.checks.notebooks import hidden_checks

a5 = hidden_checks("a5_dependencies")      # exercises/hidden

FULL = 10


def score(fn):
    results = a5.check_all(fn)
    return sum(r.points for r in results), sum(r.max_points for r in results)


@pytest.mark.parametrize("fn", [sol.reference, sol.host_sum, sol.three_and_two])
def test_correct_schedules_score_full_marks(fn):
    assert score(fn) == (FULL, FULL)


def test_all_on_one_device_loses_half_the_device_points_and_the_speed_points():
    assert [r.points for r in a5.check_all(sol.one_device)] == [3, 1, 2, 0]
    assert "[5, 0]" in a5.check_devices_used(sol.one_device).seen


def test_a_value_used_on_the_wrong_device_is_named():
    r = a5.check_dependencies(sol.no_copy)
    assert r.points == 0 and "lives on device 1" in r.seen and "put" in r.hint
    assert a5.check_faster(sol.no_copy).points == 0


def test_waiting_after_each_task_is_no_faster_and_the_hint_says_why():
    r = a5.check_faster(sol.waits_after_each)
    assert r.points == 0 and "before waiting" in r.hint
    assert [x.points for x in a5.check_all(sol.waits_after_each)][:3] == [3, 2, 2]


def test_a_wrong_product_order_loses_the_result_points():
    r = a5.check_result(sol.swapped_product)
    assert r.points == 0 and "do not commute" in r.hint


def test_products_on_the_host_do_not_count_as_a_faster_schedule():
    assert [r.points for r in a5.check_all(sol.host_products)] == [3, 0, 2, 0]


def test_a_crashing_submission_gets_zero_with_its_error():
    results = a5.check_all(sol.raises)
    assert all(r.points == 0 for r in results)
    assert "not implemented yet" in results[0].seen


def test_the_same_submission_gets_the_same_score_ten_times():
    runs = {tuple((r.points, r.message) for r in a5.check_all(sol.reference)) for _ in range(10)}
    assert len(runs) == 1


def test_virtual_devices_queue_work_and_the_host_waits_only_when_asked():
    d0, d1 = virtual_devices(2)
    x0, x1 = d0.put(np.eye(256, dtype=np.float32)), d1.put(np.eye(256, dtype=np.float32))
    f0, f1 = d0.submit(a5.matmul, x0, x0), d1.submit(a5.matmul, x1, x1)
    host_before = d0.clock.host_ms
    (_, t0a, t0b), (_, t1a, t1b) = d0.tasks[0], d1.tasks[0]
    assert max(t0a, t1a) < min(t0b, t1b)           # the two products overlap in virtual time
    assert host_before < t0b                       # submit returned before the work finished
    assert isinstance(f0.result(), VRef) and d0.clock.host_ms >= t0b
    np.testing.assert_array_equal(d1.get(f1), np.eye(256, dtype=np.float32))


def test_the_serial_baseline_is_slower_than_the_compute_critical_path():
    assert a5.serial_ms() > a5.critical_path_ms() > 0


def test_the_notebooks_reference_solution_scores_full_marks():
    from tests.checks.notebooks import namespace

    run_dag = namespace("a5_dependencies", {})["run_dag"]
    assert score(run_dag) == (FULL, FULL)
    assert a5_public.public_run_dag(run_dag).passed
