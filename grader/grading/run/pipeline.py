"""The instructor's pipeline around nbgrader: grade a whole class, in parallel, resumably.

``grade_course`` (``make grade``, ``python -m grader.grading``):

1. under a lock on the course folder: ``generate_assignment`` for every assignment (autograde
   needs the gradebook entries and checksums it writes); then every (student, assignment)
   goes into the ledger (:mod:`.ledger`, in the gradebook's database) with a digest of the
   submission and of every other input of its verdict (:mod:`.inputs`: source, hidden
   checks, grader, limits, the overlay's secret). A job already done with the same digest is
   not graded again; a resubmission or a changed input is, and the run says which input
   changed. Jobs of a grading run that was killed
   (its processes are gone, or its lease ran out) go back to the queue;
2. ``workers`` processes (:mod:`.worker`, one per core by default) take jobs from the ledger
   and grade them (:mod:`.item`: kernels in the sandbox, hidden tests in the judge, limits
   from ``course.toml``). Several machines pointed at one PostgreSQL gradebook share the
   queue the same way. A progress bar shows what is done and running;
3. Ctrl-C stops the workers, hands their running jobs back and keeps every finished grade:
   running the command again finishes the class;
4. reports: ``reports/grades.csv`` and ``grades.json`` (one row per student and assignment of
   the whole class, from the ledger, with status and reason) and nbgrader's export
   ``reports/nbgrader_grades.csv``; feedback under ``feedback/<student>/<assignment>/``.
   A report that would mix verdicts made with other inputs than the course's now (a run
   limited with ``--student``/``--assignment`` after a hidden check changed) is not
   written: the run stops and names them (:func:`_stale`).
   A field that a spreadsheet would run as a formula is neutralised
   (:func:`~grader.grading.submission.intake.csv_safe`).

Submissions are only read, never changed (:mod:`..submission.intake` reads them as data, never
following a link); one failure never stops the others. A folder in ``submitted/`` whose
name is not a valid student id (:func:`~grader.grading.submission.intake.id_problem`) is not graded and
never names a file: it is reported as ``invalid`` with the reason.
"""
from __future__ import annotations

import csv
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config import GradingConfig, load, with_overrides
from ..config import check as check_config
from .item import Outcome, api, submission_sha256
from . import inputs
from .. import overlay
from .progress import Progress, summary
from .spawn import Spawner
from ..sandbox import procs
from ..submission import intake

__all__ = ["Outcome", "GradingRun", "grade_course", "assignments", "students"]

WAIT_S = 5.0   # how often a machine with nothing left to claim looks at the others' jobs


@dataclass
class GradingRun:
    course: Path
    outcomes: list[Outcome]
    wall_s: float = 0.0
    workers: int = 0
    graded_now: set = field(default_factory=set)   # (student, assignment) graded by this run
    notes: list = field(default_factory=list)      # what this run said (inputs that changed)

    def table(self) -> str:
        lines = [f"{'student':<10} {'assignment':<22} {'score':>11}  {'status':<8} reason"]
        for o in self.outcomes:
            lines.append(f"{o.student:<10} {o.assignment:<22} {o.score:>5g} / {o.max_score:<3g}  "
                         f"{o.status:<8} {o.reason}")
        return "\n".join(lines)

    def summary(self) -> str:
        return summary(self.outcomes, self.wall_s, self.workers, self.graded_now, self.course)

    def find(self, student: str, assignment: str) -> Outcome:
        return next(o for o in self.outcomes if (o.student, o.assignment) == (student, assignment))


def assignments(course: Path) -> list[str]:
    """The assignments of ``source/`` and of the private overlay's (:mod:`..overlay`)."""
    return overlay.assignments(course)


def students(course: Path) -> list[str]:
    """The names in ``submitted/`` that are folders or links (a link is refused when read)."""
    sub = course / "submitted"
    if not sub.is_dir():
        return []
    with os.scandir(sub) as it:
        return sorted(e.name for e in it if e.is_symlink() or e.is_dir(follow_symlinks=False))


def _unknown_names(course: Path, only_students: list[str] | None,
                   only_assignments: list[str] | None) -> str | None:
    """What is wrong with the names given with ``--student`` / ``--assignment``, or None: a
    name that is not in the course would select nothing, and "nothing to grade" then reads
    as if that student's or that assignment's work were graded already."""
    problems = []
    for kind, given, known, where in (
            ("assignment", only_assignments, assignments(course), "source/"),
            ("student", only_students, students(course), "submitted/")):
        missing = [n for n in dict.fromkeys(given or ()) if n not in known]
        if missing:
            listed = ", ".join(intake.shown(n) for n in known[:30])
            more = f" and {len(known) - 30} more" if len(known) > 30 else ""
            problems.append(
                f"no {kind} {', '.join(intake.shown(n) for n in missing)} in "
                f"{course}/{where}: the {kind}s there are {listed}{more}" if known else
                f"no {kind} {', '.join(intake.shown(n) for n in missing)} in "
                f"{course}/{where}: it holds no {kind} yet")
    return "; ".join(problems) or None


def _rejected(cfg: GradingConfig, who: list[str], names: list[str]) -> tuple[list[str], list[Outcome]]:
    """(the valid student ids, an ``invalid`` outcome for each other folder of every
    assignment): an id that is too long or holds other characters never names a file."""
    from .item import max_score

    ok, bad = [], []
    for s in who:
        why = intake.id_problem("student", s, cfg.submission.max_id_length)
        if why is None:
            ok.append(s)
            continue
        label = intake.shown(s, 40)
        bad += [Outcome(label, a, 0.0, max_score(cfg, a), "invalid",
                        f"not graded: {why}; rename the folder submitted/{label}") for a in names]
    return ok, bad


@contextmanager
def _course_lock(course: Path):
    """One grading run at a time sets the course up (several may grade at once)."""
    with open(course / ".grading.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _regraded(resets: list, now: dict[str, dict]) -> list[str]:
    """What to say about the verdicts :meth:`.ledger.Ledger.sync` sent back because an
    input other than the submission changed (one line per assignment and change)."""
    counts: dict[tuple[str, str], int] = {}
    for r in resets:
        if r.state != "done" or r.inputs_before == r.inputs:
            continue       # a resubmission, or a job not graded yet
        why = inputs.describe(r.inputs_before, inputs.dumps(now[r.assignment]))
        counts[(r.assignment, why)] = counts.get((r.assignment, why), 0) + 1
    return [f"{a}: {n} verdict{'s are' if n > 1 else ' is'} out of date ({why}): graded again"
            for (a, why), n in sorted(counts.items())]


def _stale(cfg: GradingConfig, ledger, grader: str) -> str | None:
    """Why the whole class's report cannot be written: verdicts in the ledger made with
    other inputs than the course's now (None where every one is current). Verdicts of an
    assignment or a student folder that is gone cannot be graded again and are left out."""
    now: dict[str, str] = {}
    stale: dict[tuple[str, str], int] = {}
    known, who = set(assignments(cfg.course)), set(students(cfg.course))
    for (s, a), stored in sorted(ledger.done_inputs().items()):
        if a not in known or s not in who:
            continue
        if a not in now:
            now[a] = inputs.dumps(inputs.verdict_inputs(cfg, a, grader))
        if stored != now[a]:
            why = inputs.describe(stored, now[a])
            stale[(a, why)] = stale.get((a, why), 0) + 1
    if not stale:
        return None
    lines = [f"{a}: {n} verdict{'s' if n > 1 else ''} out of date, {why}"
             for (a, why), n in sorted(stale.items())]
    return ("the reports were not written: they would mix verdicts made with other inputs "
            "than the course's now (" + "; ".join(lines) + "). Grade those again: run the "
            "command without --student/--assignment, or with them naming those submissions")


def _in_gradebook(cfg: GradingConfig, assignment: str) -> bool:
    from nbgrader.api import MissingEntry

    with cfg.gradebook() as gb:
        try:
            gb.find_assignment(assignment)
            return True
        except MissingEntry:
            return False


def _export(cfg: GradingConfig, to: Path, students: list[str] = ()) -> None:
    """nbgrader's own export of the gradebook. Every student of ``grades.csv`` is in the
    gradebook first: one whose every notebook was missing or unreadable was never
    autograded, so nbgrader's export would have left them out."""
    from nbgrader.plugins import CsvExportPlugin

    with cfg.gradebook() as gb:
        for s in students:
            gb.update_or_create_student(s)
        CsvExportPlugin(to=str(to)).export(gb)


def _write_reports(cfg: GradingConfig, everything: list[Outcome]) -> None:
    reports = cfg.course / "reports"
    everything = sorted(everything, key=lambda o: (o.student, o.assignment))
    with open(reports / "grades.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "assignment", "score", "max_score", "status", "reason", "seconds"])
        for o in everything:
            w.writerow([intake.csv_safe(v) for v in (
                o.student, o.assignment, f"{o.score:g}", f"{o.max_score:g}", o.status,
                o.reason, f"{o.seconds:.1f}")])
    (reports / "grades.json").write_text(json.dumps([asdict(o) for o in everything], indent=1))
    _export(cfg, reports / "nbgrader_grades.csv",
            sorted({o.student for o in everything if o.status != "invalid"}))
    _neutralise(reports / "nbgrader_grades.csv")


def _neutralise(path: Path) -> None:
    """Rewrite a CSV file with every field :func:`~grader.grading.submission.intake.csv_safe`."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([[intake.csv_safe(v) for v in row] for row in rows])


class _Worker:
    """One grading worker: forked by the spawner (:mod:`.spawn`) where there is one that
    runs, else a process of its own; ``proc`` answers as a ``subprocess.Popen`` does."""

    def __init__(self, cfg: GradingConfig, slot: int, overrides: dict, only: list | None,
                 spawner: Spawner | None = None) -> None:
        self.slot = slot
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{slot}"
        self.runtime = tempfile.mkdtemp(prefix=f"grading-slot{slot}-")
        r, w = os.pipe()
        log = open(cfg.course / "reports" / "logs" / f"worker-{slot}.log", "ab")
        argv = ["--course", str(cfg.course), "--slot", str(slot), "--owner", self.owner,
                "--overrides", json.dumps(overrides), "--only", json.dumps(only) if only else "",
                "--runtime", self.runtime]
        self.proc = spawner.worker(argv, log.fileno(), w) if spawner is not None else None
        if self.proc is None:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grader.grading.run.worker", *argv, "--events", str(w)],
                cwd=cfg.course, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(w,), start_new_session=True)
        log.close()
        os.close(w)
        self.events = os.fdopen(r, "r")
        self.job: tuple[str, str] | None = None
        self.started = 0.0

    def stop(self, sig: int) -> None:
        pid = self.proc.pid
        if pid <= 1:                 # the spawner could not start it: nothing to signal
            return
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass

    def ended(self) -> None:
        """The worker process has ended: its runtime folder goes (it may have been killed
        before it could remove it)."""
        shutil.rmtree(self.runtime, ignore_errors=True)


def _workers_failed(cfg: GradingConfig, codes: list) -> str:
    """What to say when every worker of a round stopped with an error and none recorded a
    grade: the last line of the first worker log that has one (the worker's own reason)."""
    logs = sorted((cfg.course / "reports" / "logs").glob("worker-*.log"))
    last = ""
    for log in logs:
        try:
            lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
        except OSError:
            continue
        if lines:
            last = f" {log.name} ends: {lines[-1][-500:]}"
            break
    return (f"every grading worker stopped with an error (exit codes "
            f"{', '.join(str(c) for c in codes)}) before grading anything, so grading "
            f"stopped instead of starting them again.{last}")


def _run_workers(cfg: GradingConfig, workers: list[_Worker], overrides: dict, only: list | None,
                 progress: Progress | None, ledger, spawner: Spawner | None = None) -> list:
    """Run ``workers`` until each has ended; returns the exit codes of those that ended on
    their own between jobs (not one that died while grading, which the ledger records as a
    fault, one the spawner never started, or one stopped here for overrunning a job)."""
    # the worker's own watchdogs (the notebook, then its feedback page) act first
    deadline = cfg.limits.notebook_timeout_s + cfg.limits.feedback_timeout_s + 120
    codes: list = []
    try:
        while workers:
            ready, _, _ = select.select([w.events for w in workers], [], [], 1.0)
            for w in list(workers):
                if w.events in ready:
                    line = w.events.readline()
                    if not line:                      # the worker ended
                        w.proc.wait()
                        w.ended()
                        workers.remove(w)
                        failed = getattr(w.proc, "failed", None)   # the spawner did not start it
                        if w.job is None and not failed:
                            codes.append(w.proc.returncode)
                        if w.job is not None:   # while grading: not the submission's doing
                            job = ledger.job(*w.job)
                            if job is not None:
                                ledger.fault(job, w.owner, "its grading worker stopped (exit "
                                             f"code {w.proc.returncode}) while grading it")
                            if progress:
                                progress.running.pop(w.slot, None)
                        if failed and progress is not None:
                            print(f"\nworker {w.slot} did not start: {failed} (see "
                                  "reports/logs/spawner.log); workers start as processes of "
                                  "their own now", file=sys.stderr)
                        elif w.proc.returncode not in (0, None) and progress is not None:
                            print(f"\nworker {w.slot} stopped with exit code {w.proc.returncode}; see "
                                  f"reports/logs/worker-{w.slot}.log", file=sys.stderr)
                        continue
                    ev = json.loads(line)
                    if ev["event"] == "start":
                        w.job, w.started = (ev["student"], ev["assignment"]), time.monotonic()
                        if progress:
                            progress.started(w.slot, f"{ev['student']} {ev['assignment']}")
                    elif ev["event"] == "done":
                        w.job = None
                        if progress:
                            progress.finished(w.slot, Outcome.from_dict(ev["outcome"]), ev["recorded"])
                    elif ev["event"] == "fault":
                        w.job = None
                        if progress:
                            progress.running.pop(w.slot, None)
                            progress.note(f"{ev['student']} {ev['assignment']} goes back to the "
                                          f"queue: {ev['reason']}")
                elif w.job and time.monotonic() - w.started > deadline:
                    # The worker itself did not stop the notebook: end it and record why.
                    w.stop(signal.SIGKILL)
                    procs.kill_descendants(w.proc.pid)
                    w.proc.wait()
                    w.ended()
                    from .item import max_score
                    o = Outcome(*w.job, 0.0, max_score(cfg, w.job[1]), "timeout",
                                f"grading took longer than {deadline:g} s and the grading worker "
                                "was stopped")
                    job = ledger.job(*w.job)
                    if job is not None:
                        ledger.complete(job, w.owner, asdict(o))
                    if progress:
                        progress.finished(w.slot, o)
                    workers.remove(w)
                    workers.append(_Worker(cfg, w.slot, overrides, only, spawner))
    except BaseException:
        for w in workers:                 # Ctrl-C: workers hand their jobs back
            w.stop(signal.SIGTERM)
        for w in workers:
            try:
                w.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                w.stop(signal.SIGKILL)
                procs.kill_descendants(w.proc.pid)
                w.proc.wait()
            w.ended()
        raise
    return codes


def _spawner(cfg: GradingConfig, n: int) -> Spawner | None:
    """The process the ``n`` workers are forked from (:mod:`.spawn`: their imports once, not
    ``n`` times); None for a single worker, or where it cannot start (each worker then
    starts as a process of its own)."""
    if n < 2:
        return None
    try:
        return Spawner(cfg.course, cfg.course / "reports" / "logs" / "spawner.log")
    except OSError as e:
        print(f"grading workers start one by one: the spawner did not start ({e})", file=sys.stderr)
        return None


def grade_course(course: str | Path = "exercises", *, only_students: list[str] | None = None,
                 only_assignments: list[str] | None = None, cell_timeout: int | None = None,
                 notebook_timeout: float | None = None, memory_gb: float | None = None,
                 workers: int | None = None, sandbox: str | None = None,
                 regrade: bool = False, verbose: bool = True) -> GradingRun:
    """Grade every submission in ``course/submitted`` that is not graded yet (``regrade``:
    the selected ones again). Returns the outcomes of the selected students and assignments."""
    t0 = time.perf_counter()
    overrides = {k: v for k, v in dict(cell_timeout_s=cell_timeout, notebook_timeout_s=notebook_timeout,
                                       memory_gb=memory_gb, workers=workers,
                                       sandbox_mode=sandbox).items() if v is not None}
    if not Path(course).is_dir() or not (Path(course) / "source").is_dir():
        raise ValueError(f"{Path(course).resolve()}: not a course folder (it holds "
                         "nbgrader_config.py, source/<assignment>/ and submitted/<student>/); "
                         "pass the folder with --course")
    cfg = with_overrides(load(course), **overrides)
    problem = check_config(cfg) if overrides else None   # load() checked course.toml's
    if problem:
        raise ValueError(f"{problem} (given on the command line)")
    course = cfg.course
    unknown = _unknown_names(course, only_students, only_assignments)
    if unknown:
        raise ValueError(unknown)
    if cfg.sandbox.mode != "none":
        # decided here, once: a worker that cannot isolate kernels exits, and a class whose
        # every worker exits would otherwise be started again and again
        from ..sandbox import setup

        problem = setup.check(cfg.sandbox)
        if problem:
            raise RuntimeError(problem)
    (course / "reports" / "logs").mkdir(parents=True, exist_ok=True)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    names = [a for a in assignments(course) if not only_assignments or a in only_assignments]
    for a in names:
        why = intake.id_problem("assignment", a, cfg.submission.max_id_length)
        if why:
            raise ValueError(f"source/{intake.shown(a)}: {why}; rename the assignment folder")
    who = [s for s in students(course) if not only_students or s in only_students]
    scope = [(s, a) for s in who for a in names
             if intake.id_problem("student", s, cfg.submission.max_id_length) is None]

    from .ledger import Ledger

    ledger = Ledger(cfg.db_url)
    only = None if (only_students is None and only_assignments is None) else [list(x) for x in scope]
    n = max(1, min(cfg.workers, len(scope)))
    workers: list[_Worker] = []
    spawner: Spawner | None = None
    try:
        try:
            with _course_lock(course):
                # Workers start now: they load nbgrader and the sandbox while the set-up runs, and
                # take jobs once it releases the lock.
                if len({(r["student"], r["assignment"]) for r in ledger.results()} & set(scope)) < len(scope):
                    spawner = _spawner(cfg, n)
                    workers = [_Worker(cfg, k, overrides, only, spawner) for k in range(n)]
                nbg = api(course)
                grader = inputs.grader_digest()      # the code this run's workers import
                now = {a: inputs.verdict_inputs(cfg, a, grader) for a in names}
                digest = {a: now[a]["source"] for a in names}
                for a in names:  # before any autograde; again only when the source changed, so a
                    # second grading machine does not rewrite what the first is grading with
                    stamp = course / "reports" / "generated" / f"{a}.sha256"
                    if stamp.exists() and stamp.read_text() == digest[a] and _in_gradebook(cfg, a) \
                            and (course / "release" / a).is_dir():
                        continue
                    res = nbg.generate_assignment(a, force=True)
                    if not res["success"]:
                        raise RuntimeError(f"generate_assignment {a} failed:\n{res.get('error', '')[-3000:]}")
                    stamp.parent.mkdir(exist_ok=True)
                    stamp.write_text(digest[a])
                if regrade:
                    for s, a in scope:
                        ledger.forget(student=s, assignment=a)
                resets = ledger.sync([(s, a, inputs.key(submission_sha256(course, s, a, cfg.submission),
                                                        now[a]), inputs.dumps(now[a]))
                                      for s, a in scope])
                notes = _regraded(resets, now)
                for line in notes:
                    print(line, file=sys.stderr)
                ledger.release_dead(socket.gethostname(), procs.alive)

        except BaseException:
            for w in workers:               # interrupted during the set-up
                w.stop(signal.SIGKILL)
                w.proc.wait()
                w.ended()
            raise
        done_before = {(r["student"], r["assignment"]) for r in ledger.results()}
        todo = [x for x in scope if x not in done_before]
        progress = Progress(len(scope), len(scope) - len(todo)) if verbose else None
        if not todo:
            for w in workers:
                w.stop(signal.SIGTERM)
                w.proc.wait()
                w.ended()
        else:
            try:
                while True:
                    workers = workers or [_Worker(cfg, k, overrides, only, spawner) for k in range(n)]
                    before = len(ledger.results())
                    codes = _run_workers(cfg, workers, overrides, only, progress, ledger, spawner)
                    workers = []
                    done = {(r["student"], r["assignment"]) for r in ledger.results()}
                    left = [x for x in scope if x not in done]
                    if not left:
                        break
                    if codes and all(c not in (0, None) for c in codes) \
                            and len(ledger.results()) == before:
                        raise RuntimeError(_workers_failed(cfg, codes))
                    # Jobs another grading machine is working on: wait for them (or for their
                    # lease to run out, when a worker here takes them over).
                    if progress:
                        progress.note(f"waiting for {len(left)} submissions being graded elsewhere")
                    time.sleep(WAIT_S)
            finally:
                if progress:
                    progress.close()
    finally:
        if spawner is not None:
            spawner.close()
    results = {(r["student"], r["assignment"]): Outcome.from_dict(r) for r in ledger.results()}
    _, rejected = _rejected(cfg, who, names)
    stale = _stale(cfg, ledger, grader)
    if stale:
        raise RuntimeError(stale)
    _write_reports(cfg, list(results.values()) + rejected)
    missing = [x for x in scope if x not in results]
    if missing:
        raise RuntimeError(f"{len(missing)} submissions were not graded (e.g. {missing[0]}); "
                           "see reports/logs/worker-*.log and run again to finish")
    return GradingRun(course, [results[x] for x in scope] + rejected, time.perf_counter() - t0, n,
                      set(todo) | {(o.student, o.assignment) for o in rejected}, notes)
