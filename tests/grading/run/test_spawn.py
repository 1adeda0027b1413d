"""The spawner (grader/grading/run/spawn.py): grading workers forked from one process that has
loaded their modules. Each worker is the spawner's child with its own log and events pipe
(and no other worker's: a leaked write end would hide that worker's end from the
pipeline), its exit status reaches the pipeline, and a pipeline whose spawner is gone starts
its workers as processes of their own."""
from __future__ import annotations

import dataclasses
import fcntl
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from grader.grading.config import load
from grader.grading.run import pipeline
from grader.grading.run.spawn import Forked, Spawner

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def course():
    c = Path(tempfile.mkdtemp(prefix="spawn-course-"))
    for f in ("nbgrader_config.py", "course.toml"):
        shutil.copy(EXERCISES / f, c)
    (c / "source").mkdir()
    (c / "reports" / "logs").mkdir(parents=True)
    yield c
    shutil.rmtree(c, ignore_errors=True)


@pytest.fixture
def spawner(course):
    s = Spawner(course, course / "reports" / "logs" / "spawner.log")
    yield s
    if s.proc.poll() is None:
        s.close()


@pytest.fixture
def held_lock(course):
    """The course's set-up lock, held: a worker waits on it before its first job."""
    with open(course / ".grading.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
        fcntl.flock(f, fcntl.LOCK_UN)


def _ask(spawner: Spawner, course: Path, slot: int, log: Path) -> tuple[Forked, int]:
    r, w = os.pipe()
    with open(log, "ab") as out:
        f = spawner.worker(["--course", str(course), "--slot", str(slot), "--owner",
                            f"test:{os.getpid()}:{slot}", "--runtime",
                            tempfile.mkdtemp(prefix=f"spawn-slot{slot}-")], out.fileno(), w)
    os.close(w)
    assert f is not None
    return f, r


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _eof_within(fd: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if select.select([fd], [], [], 0.2)[0]:
            if not os.read(fd, 1 << 16):
                return True
    return False


def test_a_worker_is_the_spawners_child_and_its_status_and_pipe_end_reach_the_pipeline(
        course, spawner, held_lock, tmp_path):
    a, a_events = _ask(spawner, course, 0, tmp_path / "a.log")
    b, b_events = _ask(spawner, course, 1, tmp_path / "b.log")
    try:
        assert a.pid > 1 and b.pid > 1 and a.pid != b.pid
        assert _ppid(a.pid) == spawner.proc.pid == _ppid(b.pid)
        time.sleep(1.0)                          # both set up, waiting on the lock
        assert a.poll() is None and b.poll() is None
        assert os.getpgid(a.pid) == a.pid        # a session of its own, as before
        os.kill(a.pid, signal.SIGKILL)
        assert a.wait(timeout=30) == -signal.SIGKILL
        # b was forked after a: had it inherited a's events pipe, no end of file here
        assert _eof_within(a_events, 10), "another worker holds this worker's events pipe"
        assert b.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            b.wait(timeout=0.2)
    finally:
        for f in (a, b):
            if f.returncode is None:
                os.kill(f.pid, signal.SIGKILL)
                f.wait(timeout=30)
        os.close(a_events)
        os.close(b_events)


def test_a_worker_that_fails_says_why_in_its_own_log_with_its_exit_code(spawner, tmp_path):
    log = tmp_path / "w.log"
    f, events = _ask(spawner, tmp_path / "no-such-course", 0, log)
    try:
        assert f.wait(timeout=60) == 1
        assert _eof_within(events, 10)
        assert "no-such-course" in log.read_text()
    finally:
        os.close(events)
    assert "spawner ready" in (Path(spawner.course) / "reports" / "logs" / "spawner.log").read_text()


def test_without_a_spawner_the_pipeline_starts_its_workers_as_processes_of_their_own(
        course, spawner, held_lock):
    spawner.proc.kill()
    spawner.proc.wait()
    cfg = load(course)
    w = pipeline._Worker(cfg, 0, {}, None, spawner)
    try:
        assert isinstance(w.proc, subprocess.Popen)
        assert "grader.grading.run.worker" in w.proc.args
        time.sleep(0.5)
        assert w.proc.poll() is None             # a working worker, waiting on the lock
    finally:
        w.stop(signal.SIGKILL)
        w.proc.wait(timeout=30)
        w.ended()


def test_a_single_worker_needs_no_spawner(course):
    assert pipeline._spawner(load(course), 1) is None


def test_a_spawner_that_cannot_load_fails_its_workers_clearly_and_the_pipeline_goes_on(tmp_path):
    broken = tmp_path / "course"
    (broken / "reports" / "logs").mkdir(parents=True)
    shutil.copy(EXERCISES / "nbgrader_config.py", broken)
    (broken / "course.toml").write_text("[limits]\nmemory_gb = 'a lot'\n")
    s = Spawner(broken, broken / "reports" / "logs" / "spawner.log")
    try:
        f, events = _ask(s, broken, 0, tmp_path / "w.log")
        try:
            assert f.wait(timeout=60) == 1 and f.failed == "the spawner ended"
            assert _eof_within(events, 10)        # the pipeline sees this worker end
        finally:
            os.close(events)
        assert "memory_gb" in (broken / "reports" / "logs" / "spawner.log").read_text()
        r, w = os.pipe()
        try:
            assert s.worker(["--help"], w, w) is None    # known gone: start workers alone
        finally:
            os.close(r)
            os.close(w)
    finally:
        s.close()


def test_a_course_folder_the_spawner_cannot_start_in_means_no_spawner(tmp_path, capsys):
    cfg = dataclasses.replace(load(EXERCISES), course=tmp_path / "gone")
    assert pipeline._spawner(cfg, 2) is None
    assert "the spawner did not start" in capsys.readouterr().err
