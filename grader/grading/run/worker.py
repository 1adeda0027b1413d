"""A grading worker process: claims jobs from the ledger and grades them until none is left.

``python -m grader.grading.run.worker --course C --slot K --owner HOST:PID:K --events FD
[--overrides JSON]``; started by :func:`grader.grading.run.pipeline.grade_course`, one per slot.
Its stdout and stderr go to ``reports/logs/worker-K.log``; what it tells the parent (a job
started, a job done) goes as JSON lines to the pipe ``FD``, which no kernel inherits.

The ledger (:mod:`.ledger`, in the gradebook's database) is the truth: a job is claimed
with a lease that a background thread renews; the outcome is stored only while the lease is
still this worker's, so a job taken over after a lease ran out is never recorded twice. On
SIGTERM (the parent was interrupted) the running kernel is killed and the job is handed
back, not recorded. A job that failed for reasons that are not the submission's
(:class:`~grader.grading.run.item.GradingFault`, a crashed or killed worker, a lost lease) goes
back to the queue. Once it has faulted :data:`MAX_FAULTS` times: if the last fault was the
machine's (:data:`~grader.grading.run.item.MACHINE_FAULTS`: an out-of-memory kill or a
starved time limit, judged on the job's control group) it is graded once more without
blaming the machine, scored as it ran, with a note (the evidence may be wrong, a score is
not withheld for ever); any other fault (a worker that died, a lost lease) is recorded as
``failed`` with the last reason, not graded again.

Each job runs in a control group of its own (:func:`job_group`, where the machine allows
one): the kernel's, the judge's groups are made below it, so the job's processes share one
``memory_gb`` and one CPU share, the same weight as every other job's; removed when the job
ends.

Each job's kernels get a folder of their own (:func:`grader.grading.sandbox.setup.job`: sockets,
connection files), removed when the job ends; the worker's runtime folder
(``--runtime``, made by the parent, which removes it when the worker has ended) holds only
the kernelspec and these job folders.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

if __name__ == "__main__":
    # nbformat imports jsonschema, which builds rfc3987_syntax's Lark grammar when imported:
    # about 1 s of CPU per worker, for jsonschema's "iri" format checks, which nothing here
    # uses (nbformat validates notebooks with fastjsonschema). Without the module jsonschema
    # leaves those two checks out, as it does wherever rfc3987_syntax is not installed.
    sys.modules.setdefault("rfc3987_syntax", None)   # type: ignore[arg-type]

from ..sandbox import bounds, procs
from ..config import GradingConfig, load, with_overrides
from .item import MACHINE_FAULTS, GradingFault, Outcome, grade_one, log_name, max_score

LEASE_S = 90.0        # a job whose worker stops renewing is free again after this long
MAX_FAULTS = 3        # faults (not the submission's) after which a job is recorded as failed


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


JOB_PREFIX = "course-job-"


def fair_cores(cfg: GradingConfig) -> float:
    """A job's fair share of this machine's cores: one, or the cores over the workers."""
    return min(1.0, (os.cpu_count() or 1) / max(1, cfg.workers))


def job_group(cfg: GradingConfig, uid: int):
    """A control group for one job (``course-job-<uid>-<pid>``, the job's ``memory_gb``, the
    CPU controller at every job's weight), named in the environment (bounds.JOB_ENV) so that
    the groups the kernel's launcher and the judge make go below it; None where the machine
    allows none, or without the sandbox."""
    if cfg.sandbox.mode == "none":
        return None
    return bounds.Box.create(f"{JOB_PREFIX}{uid}-{os.getpid()}",
                             int(cfg.limits.memory_gb * 2**30), None, cpu=True)


def sandbox_setup(cfg: GradingConfig, slot: int, runtime: Path):
    """(env, kernel Config) that start this slot's kernels in the sandbox; mode "none":
    the plain kernel."""
    from ..sandbox import setup

    if cfg.sandbox.mode != "none":
        problem = setup.check(cfg.sandbox)
        if problem:
            raise SystemExit(problem)
    return setup.prepare(cfg.limits, cfg.sandbox, slot, runtime)


def share_gradebook_engines() -> dict:
    """Give this process's nbgrader ``Gradebook`` objects one SQLAlchemy engine per database
    URL instead of a new one each (returns the engines, by URL and options).

    nbgrader opens a ``Gradebook`` many times per notebook (its autograde converter and
    preprocessors, the judge's cell roles, the scores, the feedback's grades), and each made
    an engine of its own: its dialect set up again and every query compiled again (SQLAlchemy
    caches compiled SQL per engine), about 10 ms of CPU per open. A ``Gradebook`` still
    connects, checks its tables and its course on every open, and its ``close`` still
    returns the connections (``Engine.dispose``); only the engine (the compiled queries,
    the dialect) is kept. A forked child (a feedback page's) starts with a pool of its own
    and never uses the parent's connections."""
    import nbgrader.api as nbapi

    if hasattr(nbapi.create_engine, "engines"):   # done already (in the spawner: .spawn)
        return nbapi.create_engine.engines
    engines: dict = {}
    make = nbapi.create_engine

    def shared(url, **kw):
        key = (str(url), repr(sorted(kw.items())))
        if key not in engines:
            engines[key] = make(url, **kw)
        return engines[key]

    shared.engines = engines
    nbapi.create_engine = shared
    os.register_at_fork(after_in_child=lambda: [e.dispose(close=False) for e in engines.values()])
    return engines


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
    p = argparse.ArgumentParser(prog="python -m grader.grading.run.worker")
    p.add_argument("--course", required=True)
    p.add_argument("--slot", type=int, required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--events", type=int, required=True, help="file descriptor for JSON events")
    p.add_argument("--overrides", default="{}", help="JSON: config values to override")
    p.add_argument("--only", default="", help="JSON list of [student, assignment] to take")
    p.add_argument("--runtime", default="", help="this worker's runtime folder (default: a new "
                   "one in the temp folder, removed at the end)")
    a = p.parse_args(argv)
    events = os.fdopen(a.events, "w", buffering=1)
    os.set_inheritable(a.events, False)
    cfg = with_overrides(load(a.course), **json.loads(a.overrides))
    only = {tuple(x) for x in json.loads(a.only)} if a.only else None
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    os.environ["MPLBACKEND"] = "Agg"
    runtime = Path(a.runtime) if a.runtime else Path(tempfile.mkdtemp(prefix=f"grading-slot{a.slot}-"))
    runtime.mkdir(mode=0o711, exist_ok=True)
    os.chmod(runtime, 0o711)
    try:
        return _serve(a, cfg, only, events, runtime)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _serve(a, cfg: GradingConfig, only, events, runtime: Path) -> int:
    uid_slot, _lock = sandbox_slot(cfg, a.slot)
    bounds.sweep(f"{JOB_PREFIX}{cfg.sandbox.uid_base + uid_slot}-")   # a killed worker's
    env, kernel_config = sandbox_setup(cfg, uid_slot, runtime)
    os.environ.update(env)
    if cfg.sandbox.mode != "none":
        kernel_config.GuardedExecute.sandbox_uid = cfg.sandbox.uid_base + uid_slot

    from ..sandbox import setup

    # loaded (and the judges' fork server started) while the pipeline sets the course up
    from . import item  # noqa: F401
    from ..judge import executor, process  # noqa: F401
    process.warm()
    share_gradebook_engines()
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
        last_try = job.faults >= MAX_FAULTS
        if last_try and job.fault not in MACHINE_FAULTS.values():
            o = _failed(cfg, job)    # not graded again: recorded with the last reason
            emit(event="done", outcome=asdict(o), recorded=ledger.complete(job, a.owner, asdict(o)))
            continue
        renew = _Renewer(ledger, job, a.owner)
        renew.start()
        fault = None
        group = job_group(cfg, cfg.sandbox.uid_base + uid_slot)
        try:
            with setup.job(runtime, cfg.sandbox, uid_slot) as (folder, job_env, job_config):
                os.environ.update(job_env)
                if group is not None:
                    os.environ.update(group.env())
                config = copy.deepcopy(kernel_config)
                config.merge(job_config)
                o = grade_one(cfg, job.student, job.assignment, kernel_config=config,
                              kill_kernels=procs.kill_descendants, logs=logs,
                              kernel_end=lambda: setup.kernel_end(folder),
                              blame_machine=group is not None and not last_try,
                              fair_cores=fair_cores(cfg),
                              note=_retried(job) if last_try else "")
        except GradingFault as e:
            if last_try:   # never claimed for ever
                o = _failed(cfg, dataclasses.replace(job, fault=str(e)))
            else:
                fault, o = str(e), None
        except Exception as e:  # noqa: BLE001 - a fault of the grader, not of the student
            name = log_name(job.student, job.assignment, ".grader-error.log")
            try:
                (logs / name).write_text(traceback.format_exc())
            except OSError:
                traceback.print_exc()
            o = Outcome(job.student, job.assignment, 0.0, _top(cfg, job.assignment), "error",
                        f"the grader failed ({type(e).__name__}: {str(e)[:300]}); see "
                        f"reports/logs/{name}")
        finally:
            os.environ.pop(bounds.JOB_ENV, None)
            if group is not None:
                group.remove()
        renew.halt.set()
        renew.join()
        if stopping.is_set():
            ledger.release(job, a.owner)
            emit(event="released", student=job.student, assignment=job.assignment)
            break
        if fault is not None:
            faults = ledger.fault(job, a.owner, fault)
            emit(event="fault", student=job.student, assignment=job.assignment, reason=fault,
                 faults=faults)
            continue
        recorded = ledger.complete(job, a.owner, asdict(o))
        emit(event="done", outcome=asdict(o), recorded=recorded)
    procs.kill_descendants()
    return 0


def _top(cfg: GradingConfig, assignment: str) -> float:
    try:
        return max_score(cfg, assignment)
    except Exception:  # noqa: BLE001 - the assignment is not in the gradebook
        return 0.0


def _retried(job) -> str:
    """The note of a job graded on its last try, after :data:`MAX_FAULTS` machine faults."""
    return (f"grading was stopped {job.faults} times by what looked like the machine's "
            f"fault (the last time: {job.fault}); this time it was scored as it ran")


def _failed(cfg: GradingConfig, job) -> Outcome:
    """The outcome of a job that failed :data:`MAX_FAULTS` times for reasons that are not
    the submission's: not graded, with the last reason."""
    return Outcome(job.student, job.assignment, 0.0, _top(cfg, job.assignment), "failed",
                   f"not graded: grading failed {job.faults} times for reasons that are not "
                   f"the submission's, the last time because {job.fault or 'of an unknown fault'}; "
                   "grade it again with --regrade once the machine is fixed")


if __name__ == "__main__":
    sys.exit(main())
