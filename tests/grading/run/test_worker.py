"""The grading worker (grader/grading/run/worker.py): what it does with a GradingFault.

A kernel that the machine's out-of-memory killer ended raises GradingFault in grade_one
(tests/grading/sandbox/test_crashes.py). Here a real worker process, on a real ledger, meets it:
the job goes back to the queue with the fault counted (never a zero stored as done), it is
graded again, and a job that faults every time ends ``failed`` with the reason after
MAX_FAULTS claims instead of being claimed forever.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.grading.run.ledger import Ledger

ROOT = Path(__file__).resolve().parents[3]

# grade_one replaced in the worker process: "ann" meets the machine's out-of-memory killer on
# her first claim only, "ben" on every claim. Each call is counted in calls.txt.
WORKER = """
import sys
from pathlib import Path
from grader.grading.run import worker
from grader.grading.run.item import GradingFault, Outcome

calls = Path(sys.argv[1]) / "calls.txt"

def grade_one(cfg, student, assignment, **kw):
    with open(calls, "a") as f:
        f.write(student + "\\n")
    if student == "ben" or calls.read_text().split().count(student) == 1:
        raise GradingFault("the machine ran out of memory and its out-of-memory killer "
                           "ended the kernel")
    return Outcome(student, assignment, 8.0, 8.0, "graded")

worker.grade_one = grade_one
sys.exit(worker.main(sys.argv[2:]))
"""


@pytest.mark.slow   # one worker process (imports nbgrader): about 10 s of CPU
def test_a_grading_fault_sends_the_job_back_and_after_max_faults_it_is_failed_not_a_zero(tmp_path):
    from grader.grading.run.worker import MAX_FAULTS

    course = tmp_path / "course"
    course.mkdir()
    (course / "course.toml").write_text('[sandbox]\nmode = "none"\n')
    (course / "reports" / "logs").mkdir(parents=True)
    db = f"sqlite:///{course}/gradebook.db"
    with Ledger(db) as led:
        led.sync([("ann", "a1", "h"), ("ben", "a1", "h")])
    r, w = os.pipe()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, str(tmp_path), "--course", str(course), "--slot", "0",
         "--owner", "testhost:1:0", "--events", str(w), "--runtime", str(tmp_path / "rt")],
        pass_fds=(w,), env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    os.close(w)
    with os.fdopen(r) as f:
        events = [json.loads(line) for line in f]
    assert proc.returncode == 0, proc.stderr[-3000:]

    calls = (tmp_path / "calls.txt").read_text().split()
    assert calls.count("ann") == 2               # the fault, then graded again
    assert calls.count("ben") == MAX_FAULTS      # never graded a fourth time
    faults = [(e["student"], e["faults"]) for e in events if e["event"] == "fault"]
    assert faults == [("ann", 1), ("ben", 1), ("ben", 2), ("ben", 3)]
    assert all("out of memory" in e["reason"] for e in events if e["event"] == "fault")
    done = {e["outcome"]["student"]: e["outcome"] for e in events if e["event"] == "done"}
    assert set(done) == {"ann", "ben"} and all(e["recorded"] for e in events
                                               if e["event"] == "done")
    with Ledger(db) as led:
        assert led.counts() == {"pending": 0, "running": 0, "done": 2}
        stored = {o["student"]: o for o in led.results()}
    assert (stored["ann"]["status"], stored["ann"]["score"]) == ("graded", 8.0)
    assert stored["ben"]["status"] == "failed" and stored["ben"]["score"] == 0
    assert f"failed {MAX_FAULTS} times" in stored["ben"]["reason"]
    assert "out of memory" in stored["ben"]["reason"]
    assert not (tmp_path / "rt").exists()        # the worker's runtime folder is removed
