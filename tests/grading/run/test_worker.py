"""The grading worker (grader/grading/run/worker.py): what it does with a GradingFault.

A kernel that the machine's out-of-memory killer ended raises GradingFault in grade_one
(tests/grading/sandbox/test_crashes.py). Here a real worker process, on a real ledger, meets it:
the job goes back to the queue with the fault counted (never a zero stored as done), it is
graded again. A job the machine seems to stop every time is graded once more after
MAX_FAULTS claims without blaming the machine, scored as it ran with a note (issue 37: a
student's crash that looked like the machine's was re-queued, then recorded as not graded);
a job that faults every time for another reason ends ``failed`` with the reason instead of
being claimed forever.
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
# her first claim only, "ben" whenever the machine may be blamed, "cal" a fault that is not
# the machine's on every claim. Each call is counted in calls.txt.
WORKER = """
import sys
from pathlib import Path
from grader.grading.run import worker
from grader.grading.run.item import MACHINE_FAULTS, GradingFault, Outcome

calls = Path(sys.argv[1]) / "calls.txt"

def grade_one(cfg, student, assignment, note="", **kw):
    with open(calls, "a") as f:
        f.write(student + "\\n")
    if student == "cal":
        raise GradingFault("the gradebook's disk is full")
    if (student == "ben" and not note) or calls.read_text().split().count(student) == 1:
        raise GradingFault(MACHINE_FAULTS["machine-oom"])
    return Outcome(student, assignment, 3.0, 8.0, "graded", note)

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
        led.sync([("ann", "a1", "h"), ("ben", "a1", "h"), ("cal", "a1", "h")])
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
    assert calls.count("ben") == MAX_FAULTS + 1  # the last try, scored as it ran
    assert calls.count("cal") == MAX_FAULTS      # never graded a fourth time
    faults = [(e["student"], e["faults"]) for e in events if e["event"] == "fault"]
    assert sorted(faults) == [("ann", 1), ("ben", 1), ("ben", 2), ("ben", 3),
                              ("cal", 1), ("cal", 2), ("cal", 3)]
    done = {e["outcome"]["student"]: e["outcome"] for e in events if e["event"] == "done"}
    assert set(done) == {"ann", "ben", "cal"} and all(e["recorded"] for e in events
                                                      if e["event"] == "done")
    with Ledger(db) as led:
        assert led.counts() == {"pending": 0, "running": 0, "done": 3}
        stored = {o["student"]: o for o in led.results()}
    assert (stored["ann"]["status"], stored["ann"]["score"], stored["ann"]["reason"]) == \
        ("graded", 3.0, "")
    assert (stored["ben"]["status"], stored["ben"]["score"]) == ("graded", 3.0)
    assert f"stopped {MAX_FAULTS} times" in stored["ben"]["reason"]
    assert "scored as it ran" in stored["ben"]["reason"]
    assert "out of memory" in stored["ben"]["reason"]
    assert stored["cal"]["status"] == "failed" and stored["cal"]["score"] == 0
    assert f"failed {MAX_FAULTS} times" in stored["cal"]["reason"]
    assert "disk is full" in stored["cal"]["reason"]
    assert not (tmp_path / "rt").exists()        # the worker's runtime folder is removed
