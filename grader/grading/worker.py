"""A grading worker process: claims jobs from the ledger and grades them until none is left.

``python -m grader.grading.worker --course C --slot K --owner HOST:PID:K --events FD
[--overrides JSON]``; started by :func:`grader.grading.pipeline.grade_course`, one per slot.
Its stdout and stderr go to ``reports/logs/worker-K.log``; what it tells the parent (a job
started, a job done) goes as JSON lines to the pipe ``FD``, which no kernel inherits.

The ledger (:mod:`.ledger`, in the gradebook's database) is the truth: a job is claimed
with a lease that a background thread renews; the outcome is stored only while the lease is
still this worker's, so a job taken over after a lease ran out is never recorded twice. On
SIGTERM (the parent was interrupted) the running kernel is killed and the job is handed
back, not recorded.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from . import procs
from .config import GradingConfig, load, with_overrides
from .item import Outcome, grade_one, max_score

LEASE_S = 90.0        # a job whose worker stops renewing is free again after this long


def sandbox_slot(cfg: GradingConfig, slot: int, tries: int = 256):
    """A sandbox slot no other grading process on this host holds (kernels of one slot share
    a uid, and RLIMIT_NPROC counts per uid): ``(k, lock file)``; keep the file open."""
    import fcntl

    for k in [slot, *range(tries)]:
        f = open(f"/tmp/.course-grading-uid-{cfg.sandbox.uid_base + k}.lock", "w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return k, f
        except BlockingIOError:
            f.close()
    raise SystemExit(f"no free sandbox uid in {cfg.sandbox.uid_base}..{cfg.sandbox.uid_base + tries}")


def sandbox_setup(cfg: GradingConfig, slot: int, runtime: Path):
    """(env, kernel Config) that start this slot's kernels in the sandbox; mode "none":
    the plain kernel."""
    from . import sandbox

    if cfg.sandbox.mode != "none":
        problem = sandbox.check(cfg.sandbox)
        if problem:
            raise SystemExit(problem)
    return sandbox.prepare(cfg.limits, cfg.sandbox, slot, runtime)


class _Renewer(threading.Thread):
    def __init__(self, ledger, job, owner: str) -> None:
        super().__init__(daemon=True)
        self.ledger, self.job, self.owner = ledger, job, owner
        self.halt = threading.Event()
        self.lost = False

    def run(self) -> None:
        while not self.halt.wait(LEASE_S / 3):
            try:
                if not self.ledger.renew(self.job, self.owner, LEASE_S):
                    self.lost = True
                    return
            except Exception:  # noqa: BLE001 - a database hiccup: try again next round
                traceback.print_exc()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.grading.worker")
    p.add_argument("--course", required=True)
    p.add_argument("--slot", type=int, required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--events", type=int, required=True, help="file descriptor for JSON events")
    p.add_argument("--overrides", default="{}", help="JSON: config values to override")
    p.add_argument("--only", default="", help="JSON list of [student, assignment] to take")
    a = p.parse_args(argv)
    events = os.fdopen(a.events, "w", buffering=1)
    os.set_inheritable(a.events, False)
    cfg = with_overrides(load(a.course), **json.loads(a.overrides))
    only = {tuple(x) for x in json.loads(a.only)} if a.only else None
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    os.environ["MPLBACKEND"] = "Agg"
    os.environ["COURSE_CELL_TIMEOUT"] = str(cfg.limits.cell_timeout_s)
    runtime = Path(tempfile.mkdtemp(prefix=f"grading-slot{a.slot}-"))
    os.chmod(runtime, 0o711)
    uid_slot, _lock = sandbox_slot(cfg, a.slot)
    env, kernel_config = sandbox_setup(cfg, uid_slot, runtime)
    os.environ.update(env)

    from .sandbox import kernel_end as read_end

    def kernel_end() -> str | None:
        return read_end(runtime)

    # loaded (and the judges' fork server started) while the pipeline sets the course up
    from . import item, judge, judge_process  # noqa: F401
    judge_process.warm()
    from .ledger import Ledger

    with open(cfg.course / ".grading.lock", "a") as lock:   # wait for the set-up to finish
        fcntl.flock(lock, fcntl.LOCK_SH)
        fcntl.flock(lock, fcntl.LOCK_UN)
    ledger = Ledger(cfg.db_url)
    logs = cfg.course / "reports" / "logs"
    stopping = threading.Event()

    def on_term(signum, frame):  # the parent was interrupted: stop now, hand the job back
        stopping.set()
        procs.kill_descendants()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    def emit(**event) -> None:
        try:
            events.write(json.dumps(event) + "\n")
        except (BrokenPipeError, OSError):
            stopping.set()   # the parent is gone

    while not stopping.is_set():
        job = ledger.claim(a.owner, LEASE_S, only=only)
        if job is None:
            break
        emit(event="start", student=job.student, assignment=job.assignment, t=time.time())
        renew = _Renewer(ledger, job, a.owner)
        renew.start()
        try:
            o = grade_one(cfg, job.student, job.assignment, kernel_config=kernel_config,
                          kill_kernels=procs.kill_descendants, logs=logs, kernel_end=kernel_end)
        except Exception as e:  # noqa: BLE001 - a fault of the grader, not of the student
            (logs / f"{job.student}-{job.assignment}.grader-error.log").write_text(traceback.format_exc())
            try:
                top = max_score(cfg.db_url, job.assignment)
            except Exception:  # noqa: BLE001
                top = 0.0
            o = Outcome(job.student, job.assignment, 0.0, top, "error",
                        f"the grader failed ({type(e).__name__}: {e}); see "
                        f"reports/logs/{job.student}-{job.assignment}.grader-error.log")
        renew.halt.set()
        renew.join()
        if stopping.is_set():
            ledger.release(job, a.owner)
            emit(event="released", student=job.student, assignment=job.assignment)
            break
        recorded = ledger.complete(job, a.owner, asdict(o))
        emit(event="done", outcome=asdict(o), recorded=recorded)
    procs.kill_descendants()
    return 0


if __name__ == "__main__":
    sys.exit(main())
