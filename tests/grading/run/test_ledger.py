"""The grading ledger (grader/grading/run/ledger.py) on SQLite and on a real PostgreSQL server:
each job is claimed by one worker at a time, a resubmission is graded again, a worker that
lost its claim cannot store a grade, and real processes that are killed or interrupted
midway leave nothing lost and nothing graded twice once a later run finishes."""
from __future__ import annotations

import collections
import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.grading.run.terminal import as_at_a_terminal
from sqlalchemy import create_engine, text

from grader.grading.config import load
from grader.grading.run.ledger import Ledger, owner_id, pid_alive
from tests.grading.postgres import postgres_server  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/gradebook.db"
    return request.getfixturevalue("postgres_server").new_database("ledger")


@pytest.fixture
def ledger(db_url):
    with Ledger(db_url) as led:
        yield led


def items(n: int, sha: str = "h0") -> list[tuple[str, str, str]]:
    return [(f"s{i:02d}", "a1", sha) for i in range(n)]


def test_each_synced_job_is_claimed_once_and_completed(ledger):
    ledger.sync(items(3))
    assert ledger.counts() == {"pending": 3, "running": 0, "done": 0}
    claimed = [ledger.claim(f"h:{i}:0", 60) for i in range(3)]
    assert ledger.claim("h:9:0", 60) is None
    assert sorted(j.student for j in claimed) == ["s00", "s01", "s02"]
    assert all(j.attempts == 1 and j.sha256 == "h0" for j in claimed)
    assert ledger.counts() == {"pending": 0, "running": 3, "done": 0}
    for i, job in enumerate(claimed):
        assert ledger.complete(job, f"h:{i}:0", {"score": i, "cells": {"c": (1.0, 2.0)}})
    assert ledger.counts() == {"pending": 0, "running": 0, "done": 3}
    got = {r["student"]: r for r in ledger.results()}
    assert got["s02"] == {"student": "s02", "assignment": "a1", "score": 2,
                          "cells": {"c": [1.0, 2.0]}}
    # completing twice, or as someone else, stores nothing more
    assert not ledger.complete(claimed[0], "h:0:0", {"score": 99})
    assert not ledger.complete(claimed[1], "h:0:0", {"score": 99})
    assert [r["score"] for r in ledger.results()] == [0, 1, 2]


def test_claim_can_be_limited_to_some_jobs(ledger):
    ledger.sync(items(4))
    only = [["s02", "a1"], ("s03", "a1"), ("nobody", "a1")]
    got = {ledger.claim("h:1:0", 60, only=only).student for _ in range(2)}
    assert got == {"s02", "s03"}
    assert ledger.claim("h:1:0", 60, only=only) is None
    assert ledger.claim("h:1:0", 60, only=[]) is None
    assert ledger.claim("h:1:0", 60).student in {"s00", "s01"}


def test_job_gives_the_latest_claim_for_completing_on_a_workers_behalf(ledger):
    ledger.sync(items(1))
    assert ledger.job("nobody", "a1") is None
    claimed = ledger.claim("h:1:0", 60)
    assert ledger.job("s00", "a1") == claimed
    assert not ledger.complete(ledger.job("s00", "a1"), "h:2:0", {"by": "other"})
    assert ledger.complete(ledger.job("s00", "a1"), "h:1:0", {"by": "parent"})
    assert [r["by"] for r in ledger.results()] == ["parent"]


def test_a_heartbeat_thread_can_renew_while_the_worker_completes(ledger):
    import threading
    ledger.sync(items(1))
    job = ledger.claim("h:1:0", 0.5)
    renewed = []
    t = threading.Thread(target=lambda: renewed.extend(
        ledger.renew(job, "h:1:0", 60) for _ in range(20)))
    t.start()
    t.join()
    assert renewed == [True] * 20
    assert ledger.complete(job, "h:1:0", {})


def test_concurrent_claimers_never_take_the_same_job(db_url):
    import threading
    with Ledger(db_url) as led:
        led.sync(items(60))
    taken: dict[int, list] = {k: [] for k in range(6)}
    errors: list[BaseException] = []

    def claimer(k: int) -> None:
        try:
            with Ledger(db_url) as led:   # its own engine and connections
                while (job := led.claim(f"h:{k}:0", 60)) is not None:
                    taken[k].append(job.student)
                    assert led.complete(job, f"h:{k}:0", {"by": k})
        except BaseException as e:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    everyone = [s for got in taken.values() for s in got]
    assert sorted(everyone) == [s for s, _, _ in items(60)]    # each once, none lost
    with Ledger(db_url) as led:
        assert {r["student"]: r["by"] for r in led.results()} == {
            s: k for k, got in taken.items() for s in got}


def test_sync_again_keeps_done_jobs_and_adds_new_ones(ledger):
    ledger.sync(items(2))
    job = ledger.claim("h:1:0", 60)
    assert ledger.complete(job, "h:1:0", {"score": 5})
    ledger.sync(items(3))
    assert ledger.counts() == {"pending": 2, "running": 0, "done": 1}
    assert ledger.results() == [{"student": job.student, "assignment": "a1", "score": 5}]


def test_resubmission_goes_back_to_pending_and_its_old_claim_cannot_complete(ledger):
    ledger.sync(items(2))
    done, running = ledger.claim("h:1:0", 60), ledger.claim("h:2:0", 60)
    assert ledger.complete(done, "h:1:0", {"score": 1})
    ledger.sync([(done.student, "a1", "h1"), (running.student, "a1", "h1")])
    assert ledger.counts() == {"pending": 2, "running": 0, "done": 0}
    assert ledger.results() == []
    assert not ledger.renew(running, "h:2:0", 60)
    assert not ledger.complete(running, "h:2:0", {"score": 1})
    again = ledger.claim("h:3:0", 60)
    assert again.sha256 == "h1" and again.attempts == 2


def test_a_taken_over_lease_cannot_complete(ledger):
    ledger.sync(items(1))
    slow = ledger.claim("h:1:0", 0.2)
    assert ledger.claim("h:2:0", 60) is None          # the lease still holds
    time.sleep(0.5)
    fast = ledger.claim("h:2:0", 60)                  # ran out: taken over
    assert (fast.student, fast.attempts) == (slow.student, 2)
    assert not ledger.renew(slow, "h:1:0", 60)
    assert not ledger.complete(slow, "h:1:0", {"by": "slow"})
    assert not ledger.release(slow, "h:1:0")
    assert ledger.complete(fast, "h:2:0", {"by": "fast"})
    assert [r["by"] for r in ledger.results()] == ["fast"]


def test_the_same_owner_with_an_older_claim_cannot_complete(ledger):
    # the attempt number fences: a reused owner string (pid reuse) is not enough
    ledger.sync(items(1))
    old = ledger.claim("h:1:0", 0.1)
    time.sleep(0.3)
    new = ledger.claim("h:1:0", 60)
    assert not ledger.complete(old, "h:1:0", {"by": "old"})
    assert ledger.complete(new, "h:1:0", {"by": "new"})


def test_renew_keeps_the_job(ledger):
    ledger.sync(items(1))
    job = ledger.claim("h:1:0", 0.3)
    assert ledger.renew(job, "h:1:0", 60)
    time.sleep(0.5)
    assert ledger.claim("h:2:0", 60) is None
    assert ledger.complete(job, "h:1:0", {})


def test_release_makes_the_job_pending_for_the_next_run(ledger):
    ledger.sync(items(1))
    job = ledger.claim("h:1:0", 60)
    assert ledger.release(job, "h:1:0")
    assert ledger.counts() == {"pending": 1, "running": 0, "done": 0}
    assert not ledger.complete(job, "h:1:0", {})
    assert ledger.claim("h:2:0", 60).attempts == 2


def test_release_dead_frees_only_dead_workers_of_this_host(ledger):
    ledger.sync(items(4))
    dead = ledger.claim("here:111:0", 600)
    alive = ledger.claim("here:222:1", 600)
    elsewhere = ledger.claim("there:111:0", 600)
    prefix = ledger.claim("here2:111:0", 600)  # another host whose name starts alike
    assert ledger.release_dead("here", lambda pid: pid == 222) == 1
    assert ledger.counts() == {"pending": 1, "running": 3, "done": 0}
    assert ledger.claim("x:1:0", 600).student == dead.student
    assert not ledger.complete(dead, "here:111:0", {})
    for job, owner in [(alive, "here:222:1"), (elsewhere, "there:111:0"),
                       (prefix, "here2:111:0")]:
        assert ledger.complete(job, owner, {})


def test_pid_alive_and_owner_id():
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    assert pid_alive(os.getpid())
    assert not pid_alive(int(proc.stdout))
    host, pid, slot = owner_id(3, host="m1").split(":")
    assert (host, int(pid), slot) == ("m1", os.getpid(), "3")


def test_forget_regrades_the_selected_jobs(ledger):
    ledger.sync(items(2) + [("s00", "a2", "h0")])
    while (job := ledger.claim("h:1:0", 60)) is not None:
        ledger.complete(job, "h:1:0", {})
    assert ledger.forget(student="s00") == 2
    assert ledger.counts() == {"pending": 2, "running": 0, "done": 1}
    assert ledger.forget(assignment="a1") == 2
    assert ledger.counts() == {"pending": 3, "running": 0, "done": 0}


def test_an_outcome_that_is_not_json_is_a_clear_error(ledger):
    ledger.sync(items(1))
    job = ledger.claim("h:1:0", 60)
    with pytest.raises(TypeError, match="asdict"):
        ledger.complete(job, "h:1:0", {"x": object()})
    assert ledger.counts()["running"] == 1


@functools.cache
def nbgrader_alembic_head() -> str:
    """What nbgrader itself stamps (it runs the ``alembic`` next to this Python)."""
    from nbgrader.api import get_alembic_version
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + path
    try:
        return get_alembic_version()
    finally:
        os.environ["PATH"] = path


def test_a_ledger_created_first_leaves_nbgrader_a_versioned_gradebook(db_url):
    from nbgrader.api import Gradebook
    Ledger(db_url).close()
    with Gradebook(db_url, load(ROOT / "exercises").course_id) as gb:
        gb.add_student("s00")
        assert [s.id for s in gb.students] == ["s00"]
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() \
            == [nbgrader_alembic_head()]
    engine.dispose()
    Ledger(db_url).close()  # and a second ledger finds its table


# -- real processes ---------------------------------------------------------------------
def _spawn(db_url: str, host: str, log: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.grading.ledger_worker", db_url, host,
                             str(log), "0.08", "3", *extra], cwd=ROOT,
                            preexec_fn=as_at_a_terminal)


def _lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def _wait_for(cond, what: str, limit: float = 120) -> None:
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.slow
def test_killed_and_interrupted_workers_lose_nothing_and_grade_nothing_twice(db_url, tmp_path):
    n = 40
    with Ledger(db_url) as ledger:
        ledger.sync(items(n))
    logs = {w: tmp_path / f"{w}.log" for w in "ABC"}
    oks = lambda w: sum(1 for ln in _lines(logs[w]) if ln[0] == "ok")  # noqa: E731
    a = _spawn(db_url, "m1", logs["A"])
    b = _spawn(db_url, "m1", logs["B"])
    try:
        _wait_for(lambda: oks("A") >= 3 and oks("B") >= 3, "both workers to grade")
        a.send_signal(signal.SIGKILL)                    # a machine dies
        assert a.wait(60) == -signal.SIGKILL
        b_before = oks("B")
        _wait_for(lambda: oks("B") >= b_before + 3, "B to go on alone")
        b.send_signal(signal.SIGINT)                     # Ctrl-C
        assert b.wait(60) == 130
        with Ledger(db_url) as ledger:
            left = ledger.counts()
        assert left["done"] < n and left["pending"] > 0
        c = _spawn(db_url, "m2", logs["C"], "--wait")    # the next run, on another machine
        assert c.wait(120) == 0
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait()

    with Ledger(db_url) as ledger:
        assert ledger.counts() == {"pending": 0, "running": 0, "done": n}
        stored = {r["student"]: (r["owner"], r["attempts"]) for r in ledger.results()}
    assert sorted(stored) == [s for s, _, _ in items(n)]          # none lost

    owners = {}   # worker -> owner string, from the stored outcomes and the pids
    for w, p in (("A", a), ("B", b), ("C", c)):
        owners[w] = f"{'m2' if w == 'C' else 'm1'}:{p.pid}:0"
    events = collections.defaultdict(list)   # student -> [(worker, event, attempt)]
    for w in "ABC":
        for ev, student, _assignment, attempt, *_ in _lines(logs[w]):
            events[student].append((w, ev, int(attempt)))
    last_claim = {w: next((ln[1], int(ln[3])) for ln in reversed(_lines(logs[w]))
                          if ln[0] == "claim") for w in "AB"}
    for student, (owner, attempt) in stored.items():
        ev = events[student]
        worker = next(w for w, o in owners.items() if o == owner)
        # the stored grade comes from a real claim, and complete() said yes at most once
        assert (worker, "claim", attempt) in ev, (student, ev)
        ok = [e for e in ev if e[1] == "ok"]
        assert len(ok) <= 1, (student, ev)
        assert ok in ([], [(worker, "ok", attempt)]), (student, ev)
        # any other claim of this job was ended: A was killed in it, or it was released
        # (Ctrl-C) or refused (its lease had run out and was taken over)
        for w, e, n_ in ev:
            if e == "claim" and (w, n_) != (worker, attempt):
                ended = {x[1] for x in ev if x[0] == w and x[2] == n_} & {"released", "refused"}
                assert ended or (w == "A" and last_claim["A"] == (student, n_)), (student, ev)
    assert oks("C") > 0 and not any(ln[0] == "refused" for ln in _lines(logs["C"]))


def test_a_fault_sends_the_job_back_counted_and_behind_fresh_jobs(ledger):
    ledger.sync(items(2))
    job = ledger.claim("h:1:0", 60)
    assert (job.faults, job.fault) == (0, "")
    assert ledger.fault(job, "h:2:0", "not mine") is None          # fenced like complete
    assert ledger.fault(job, "h:1:0", "the machine ran out of memory") == 1
    assert ledger.counts() == {"pending": 2, "running": 0, "done": 0}
    fresh = ledger.claim("h:1:0", 60)                              # claimed fewer times: first
    assert fresh.student != job.student and fresh.faults == 0
    again = ledger.claim("h:1:0", 60)
    assert (again.student, again.faults, again.fault) == (job.student, 1, "the machine ran out of memory")
    assert ledger.job(job.student, "a1") == again
    assert ledger.complete(again, "h:1:0", {"status": "graded"})
    assert ledger.job(job.student, "a1").faults == 0               # done: the note is gone


def test_a_lost_lease_and_a_dead_worker_count_as_faults(ledger):
    from grader.grading.run.ledger import DEAD_WORKER, LOST_LEASE

    ledger.sync(items(1))
    slow = ledger.claim("h:1:0", 0.2)
    time.sleep(0.5)
    taken = ledger.claim("h:2:0", 60)
    assert (taken.student, taken.faults, taken.fault) == (slow.student, 1, LOST_LEASE)
    ledger.sync(items(2))
    dead = ledger.claim("here:111:0", 600)
    assert ledger.release_dead("here", lambda pid: False) == 1
    back = ledger.claim("h:3:0", 60)
    assert (back.student, back.faults, back.fault) == (dead.student, 1, DEAD_WORKER)


def test_a_resubmission_or_forget_clears_the_faults(ledger):
    ledger.sync(items(1))
    job = ledger.claim("h:1:0", 60)
    ledger.fault(job, "h:1:0", "crash")
    ledger.sync(items(1, sha="h1"))
    assert ledger.claim("h:1:0", 60).faults == 0
