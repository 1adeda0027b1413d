import os

import numpy as np
import pytest

from grader.lab.core.workers import Ref, Worker, WorkerError


@pytest.fixture(scope="module")
def workers():
    ws = [Worker(0, 1), Worker(1, 1)]
    yield ws
    for w in ws:
        w.close()


def test_put_and_get_round_trip(workers):
    ref = workers[0].put(np.arange(4))
    assert isinstance(ref, Ref) and workers[0].get(ref).tolist() == [0, 1, 2, 3]


def test_an_error_names_the_task_and_the_exception_first(workers):
    fut = workers[0].submit(int, "not a number", label="parse")
    with pytest.raises(WorkerError) as err:
        fut.result(timeout=30)
    first = str(err.value).splitlines()[0]
    assert first.startswith(f"task {fut.task_id} (parse) on worker 0 raised ValueError:")
    assert "not a number" in first
    assert err.value.type_name == "ValueError" and "Traceback" in err.value.remote_traceback
    assert workers[0].submit(abs, -2).result(timeout=30) == 2   # the worker lives on


def test_synchronize_raises_the_first_failure_with_its_reason(workers):
    workers[1].submit(int, "x", label="bad")
    with pytest.raises(WorkerError, match=r"\(bad\) on worker 1 raised ValueError"):
        workers[1].synchronize(timeout=30)


def test_a_kept_future_can_be_passed_to_a_later_task(workers):
    w = workers[0]
    a = w.submit(np.arange, 5, keep=True)
    total = w.submit(np.sum, a)                   # a is still queued: passed as a Ref
    assert total.result(timeout=30) == 10


def test_a_future_from_another_worker_is_refused_with_what_to_do(workers):
    a = workers[0].submit(np.arange, 3, keep=True)
    with pytest.raises(ValueError, match="copy it over first"):
        workers[1].submit(np.sum, a)


def test_a_function_defined_in_main_runs_on_a_worker(workers):
    ns = {"__name__": "__main__"}
    exec("import numpy as np\nOFFSET = 1\n"
         "def run(x, k):\n    return np.asarray(x) * k + OFFSET\n", ns)
    assert workers[1].submit(ns["run"], [1, 2], 3).result(timeout=30).tolist() == [4, 7]


def test_a_task_reading_a_failed_tasks_value_says_so(workers):
    w = workers[0]
    bad = w.submit(int, "x", keep=True)
    with pytest.raises(WorkerError, match="that task failed"):
        w.submit(abs, bad).result(timeout=30)
    with pytest.raises(WorkerError):
        bad.result(timeout=30)


def test_closing_the_workers_of_a_folder_removes_their_logs_and_the_folder(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    pool = [Worker(i, 1, str(folder)) for i in range(2)]
    assert sorted(p.name for p in folder.iterdir()) == ["worker0.log", "worker1.log"]
    pool[0].close()
    assert [p.name for p in folder.iterdir()] == ["worker1.log"]   # the other still logs
    pool[1].close()
    pool[1].close()                                              # twice: nothing to do
    assert not folder.exists()


def test_workers_whose_parent_is_killed_remove_their_logs_and_folder(tmp_path):
    """A notebook's kernel that is killed never closes its workers: they see it gone."""
    import subprocess
    import sys
    import time

    folder = tmp_path / "logs"
    folder.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom grader.lab.core.workers import Worker\n"
         f"pool = [Worker(i, 1, {str(folder)!r}) for i in range(2)]\n"
         "print('up', flush=True)\ntime.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "up"
        assert len(list(folder.iterdir())) == 2
        parent.kill()
        parent.wait(30)
        end = time.monotonic() + 30
        while folder.exists() and time.monotonic() < end:
            time.sleep(0.2)
        assert not folder.exists()
    finally:
        parent.kill()


def test_stale_log_folders_go_and_living_young_odd_or_linked_ones_stay(tmp_path):
    """Kernels killed with their workers leave their folders; the next pool sweeps them."""
    import fcntl
    import time

    from grader.lab.core.workers import sweep_stale_logs

    def folder(name, files=("worker0.log",), age=3600):
        d = tmp_path / f"course-workers-{name}"
        d.mkdir()
        for f in files:
            (d / f).write_text("chatter\n")
        os.utime(d, (time.time() - age, time.time() - age))
        return d

    stale = folder("stale", ("worker0.log", "worker1.log", "worker1.sock"))
    held = folder("held")
    young = folder("young", age=5)
    odd = folder("odd", ("worker0.log", "notes.txt"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "worker0.log").write_text("x")
    (tmp_path / "course-workers-link").symlink_to(elsewhere)
    with open(held / "worker0.log") as lock:      # as a living worker holds its log
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.utime(held, (time.time() - 3600, time.time() - 3600))
        assert sweep_stale_logs(str(tmp_path)) == 1
    assert not stale.exists()
    assert held.exists() and young.exists() and odd.exists()
    assert (elsewhere / "worker0.log").exists()


def test_a_living_worker_holds_its_log_so_its_folder_is_never_swept(tmp_path):
    from grader.lab.core.workers import sweep_stale_logs

    folder = tmp_path / "course-workers-live"
    folder.mkdir()
    w = Worker(0, 1, str(folder))
    try:
        assert w.submit(abs, -2).result(timeout=60) == 2
        os.utime(folder, (0, 0))                  # as old as can be
        assert sweep_stale_logs(str(tmp_path)) == 0 and (folder / "worker0.log").exists()
    finally:
        w.close()
    assert not folder.exists()
