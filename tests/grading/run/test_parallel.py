"""A class grades on several workers, survives interruption and a killed machine, and
never loses or duplicates a grade."""
from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.grading.run.terminal import as_at_a_terminal

from grader.grading.config import load
from grader.grading.run.ledger import Ledger
from grader.grading.run.pipeline import grade_course
from grader.grading.run.progress import summary
from grader.grading.run.item import Outcome

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A1 = "a1_independent_ops"

pytestmark = pytest.mark.slow


def make_class(n: int) -> Path:
    course = Path(tempfile.mkdtemp(prefix="class-"))
    for f in ("nbgrader_config.py", "course.toml"):
        shutil.copy(EXERCISES / f, course)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    shutil.copytree(EXERCISES / "source" / A1, course / "source" / A1)
    for i in range(n):
        sample = ("alice", "bob")[i % 2]
        shutil.copytree(EXERCISES / "submitted" / sample / A1, course / "submitted" / f"s{i:02d}_{sample}" / A1)
    return course


def rows(course: Path) -> list[dict]:
    with open(course / "reports" / "grades.csv") as f:
        return list(csv.DictReader(f))


def expected(student: str) -> float:
    return 8.0 if student.endswith("alice") else 7.0


def test_two_workers_grade_every_submission_once_with_the_right_score():
    course = make_class(6)
    try:
        run = grade_course(course, workers=2, cell_timeout=30, verbose=False)
        assert run.workers == 2
        got = rows(course)
        assert sorted(r["student"] for r in got) == sorted(p.name for p in (course / "submitted").iterdir())
        for r in got:
            assert (r["status"], float(r["score"])) == ("graded", expected(r["student"])), r
        assert Ledger(f"sqlite:///{course / 'gradebook.db'}").counts().get("done") == 6
        # a second run under the same limits has nothing left to grade and changes nothing
        again = grade_course(course, workers=2, cell_timeout=30, verbose=False)
        assert [(o.student, o.score, o.seconds) for o in again.outcomes] == \
               [(o.student, o.score, o.seconds) for o in run.outcomes]
    finally:
        shutil.rmtree(course, ignore_errors=True)


def _start(course: Path) -> subprocess.Popen:
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return subprocess.Popen([sys.executable, "-m", "grader.grading", "--course", str(course),
                             "--workers", "2", "--cell-timeout", "30"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=as_at_a_terminal)


def _wait_done(course: Path, at_least: int, proc: subprocess.Popen, timeout: float = 240) -> int:
    led = Ledger(f"sqlite:///{course / 'gradebook.db'}")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if (course / "gradebook.db").exists():
            try:
                done = led.counts().get("done", 0)
            except Exception:  # noqa: BLE001 - the table is not there yet
                done = 0
            if done >= at_least:
                return done
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.3)
    raise AssertionError("grading made no progress")


@pytest.mark.parametrize("how", ["ctrl-c", "killed machine"])
def test_an_interrupted_run_finishes_on_the_next_without_regrading_or_duplicates(how):
    course = make_class(8)
    try:
        proc = _start(course)
        _wait_done(course, 2, proc)
        if how == "ctrl-c":
            proc.send_signal(signal.SIGINT)   # what Ctrl-C in the terminal sends the command
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 130, out
            assert "run the same command again" in out
        else:   # the whole process tree dies at once, as when a machine goes down
            from grader.grading.sandbox.procs import descendants
            # Stopped first, then killed: killed one by one, a worker could outlive its
            # kernel by a moment and record "the cell ended the kernel", which a machine
            # that goes down never does (seen on a loaded machine).
            stopped: set[int] = set()
            while True:
                tree = {proc.pid, *descendants(proc.pid)} - stopped
                if not tree:
                    break
                for p in tree:
                    try:
                        os.kill(p, signal.SIGSTOP)
                    except ProcessLookupError:
                        pass
                stopped |= tree
            for p in stopped:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.communicate(timeout=60)
        led = Ledger(f"sqlite:///{course / 'gradebook.db'}")
        first = {(r["student"], r["assignment"]): r for r in led.results()}
        assert 2 <= len(first) < 8
        if how == "ctrl-c":
            assert led.counts().get("running", 0) == 0   # handed back, not left claimed
        run = grade_course(course, workers=2, cell_timeout=30, verbose=False)
        assert len(run.outcomes) == 8 and len(rows(course)) == 8
        assert len({(o.student, o.assignment) for o in run.outcomes}) == 8
        for o in run.outcomes:
            assert (o.status, o.score) == ("graded", expected(o.student)), o
            if (o.student, o.assignment) in first:     # finished before: not graded again
                assert o.seconds == first[(o.student, o.assignment)]["seconds"]
        with load(course).gradebook() as gb:
            assert len(gb.find_assignment(A1).submissions) == 8
    finally:
        shutil.rmtree(course, ignore_errors=True)


def test_the_summary_says_what_failed_and_why_and_the_time_per_student():
    out = summary([Outcome("ann", "a1", 8, 8, "graded", seconds=3.0),
                   Outcome("ann", "a2", 0, 8, "timeout", "grading took longer than 900 s", seconds=900.0),
                   Outcome("ben", "a1", 0, 8, "invalid", "a1.ipynb is not valid JSON", seconds=0.1)],
                  wall_s=905.0, workers=2)
    assert "3 submissions: 1 graded, 1 timeout, 1 invalid" in out
    assert "timeout  ann a2: grading took longer than 900 s" in out
    assert "invalid  ben a1: a1.ipynb is not valid JSON" in out
    assert "slowest ann 903.0 s" in out and "on 2 workers" in out


def test_a_run_that_grades_nothing_new_says_so_and_where_it_looked(tmp_path):
    kept = [Outcome("ann", "a1", 8, 8, "graded", seconds=204.6)]
    out = summary(kept, wall_s=0.4, workers=2, now=set())
    assert "0 graded in this run (0.0 s of grading on 2 workers)" in out
    assert "1 graded before and kept" in out and "for 204.6 s of grading" not in out
    fresh = summary(kept, wall_s=210.0, workers=2, now={("ann", "a1")})
    assert "1 graded in this run (204.6 s of grading" in fresh and "before" not in fresh
    nothing = summary([], course=tmp_path)
    assert nothing.startswith("nothing to grade: no submission in") and str(tmp_path) in nothing


def test_a_course_folder_that_is_not_there_is_named_and_nothing_is_left(tmp_path, capsys):
    from grader.grading.__main__ import main

    typo = tmp_path / "exercisez"
    assert main(["--course", str(typo)]) == 1
    err = capsys.readouterr().err
    assert "not a course folder" in err and "exercisez" in err and "Traceback" not in err
    assert not typo.exists()


def test_the_progress_bar_redraws_one_line_on_a_terminal_and_logs_a_line_per_job(monkeypatch):
    import io
    from grader.grading.run.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("COLUMNS", "90")
    tty, log = Tty(), io.StringIO()
    for stream in (tty, log):
        p = Progress(4, done_before=1, stream=stream)
        p.started(0, "ann a1")
        p.finished(0, Outcome("ann", "a1", 8, 8, "graded", seconds=1.0))
        p.finished(1, Outcome("ben", "a1", 0, 8, "invalid", seconds=0.1))
        p.close()
    frames = tty.getvalue().split("\r")[1:]
    assert frames and all(len(f.rstrip("\n")) <= 89 for f in frames)      # fits the terminal
    assert "3/4" in frames[-1] and "1 not graded" in frames[-1]
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and "2/4" in lines[0] and "ann a1: 8/8 graded" in lines[0]
    assert "ben a1: 0/8 invalid" in lines[1]


def test_a_job_finished_twice_counts_once_in_the_progress():
    import io
    from grader.grading.run.progress import Progress

    p = Progress(2, stream=io.StringIO())
    for _ in range(8):       # taken over after its lease ran out, reported by each claimant
        p.finished(0, Outcome("ann", "a1", 0, 8, "timeout", seconds=1.0))
    assert (p.done, p.failed) == (1, 1)
    p.finished(1, Outcome("ann", "a1", 8, 8, "graded", seconds=1.0))
    p.finished(1, Outcome("ben", "a1", 8, 8, "graded", seconds=1.0))
    assert (p.done, p.failed) == (2, 0) and "2/2" in p._line()


def test_a_job_that_failed_too_often_is_recorded_as_failed_not_graded_forever():
    from grader.grading.run import inputs
    from grader.grading.run.item import submission_sha256
    from grader.grading.run.worker import MAX_FAULTS

    course = make_class(1)
    try:
        cfg = load(course)
        student = next(p.name for p in (course / "submitted").iterdir())
        now = inputs.verdict_inputs(cfg, A1)         # the job as grade_course records it
        sha = inputs.key(submission_sha256(course, student, A1, cfg.submission), now)
        with Ledger(cfg.db_url) as led:
            led.sync([(student, A1, sha, inputs.dumps(now))])
            for _ in range(MAX_FAULTS):
                led.fault(led.claim("h:1:0", 60), "h:1:0", "the machine ran out of memory")
        run = grade_course(course, workers=1, verbose=False)
        o = run.find(student, A1)
        assert (o.status, o.score, o.max_score) == ("failed", 0, 8), o
        assert f"failed {MAX_FAULTS} times" in o.reason and "ran out of memory" in o.reason
        assert {r["student"]: r["status"] for r in rows(course)} == {student: "failed"}
    finally:
        shutil.rmtree(course, ignore_errors=True)
