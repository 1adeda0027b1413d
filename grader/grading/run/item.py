"""Grading one student's assignment, in a grading worker's process (:mod:`.worker`).

Steps, for one (student, assignment):

1. the submission is read as data (:mod:`..submission.intake`: regular files only, never a link, within
   the ``[submission]`` limits) into a private folder that nbgrader reads in place of
   ``submitted/``; what is refused is noted. A missing assignment folder or notebook, or a
   notebook that is refused, not valid JSON / nbformat, is recorded as zero with the reason;
2. nbgrader's ``autograde`` through its Python API, in this process (which never runs
   student code): the student's code runs in a kernel that :mod:`..sandbox` starts isolated and
   under the limits of ``course.toml``; the hidden tests run in the judge
   (:mod:`..judge`), outside the kernel. A kernel that dies (``os._exit``, a segfault, a
   limit) makes nbgrader drop the notebook, so the cell that was running is recorded (by
   :class:`~grader.grading.sandbox.crashes.GuardedExecute`, in this process) and the student is graded
   again without it, up to ``crashes.MAX_ROUNDS`` attempts. A kernel that the *machine's*
   out-of-memory killer ended, or a time limit that ran out while other work held the CPU,
   is not the student's doing: :class:`GradingFault`, the job is graded again later
   (:mod:`.worker`). Both are decided by one rule on the job's control group, which the
   student's processes cannot forge (:func:`~grader.grading.sandbox.bounds.cause`,
   :func:`~grader.grading.sandbox.bounds.starved`); a job that keeps faulting is graded
   once more with ``blame_machine=False``: scored as it ran, with a note;
3. ``autograded/<student>/<assignment>`` keeps the graded notebook and the submitted files
   (:mod:`..sandbox.workdir`), then feedback for that student (hidden tests' code stripped, written
   within ``feedback_timeout_s``), or a page saying what happened.

Submissions are only read, never changed. The result is an :class:`Outcome`.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from ..config import GradingConfig, SubmissionLimits
from .. import overlay
from ..sandbox import bounds, crashes, workdir
from ..sandbox.setup import MACHINE_OOM
from ..submission import intake

__all__ = ["Outcome", "GradingFault", "grade_one", "precheck", "submission_sha256", "api",
           "log_name"]


class GradingFault(RuntimeError):
    """Grading failed for a reason that is not the submission's (the machine ran out of
    memory, or other work held the CPU past a time limit): the job is graded again, up to a
    few times (:mod:`.worker`)."""


# why the machine, not the submission, ended an attempt (bounds' evidence) -> the fault's words
MACHINE_FAULTS = {
    MACHINE_OOM: ("the machine ran out of memory and its out-of-memory killer ended the "
                  "kernel (this notebook's own memory limit was not reached)"),
    bounds.STARVED: ("a time limit ran out while other work held the CPU (the job's group "
                     "waited for a CPU and got less than its share)"),
}


@dataclass
class Outcome:
    student: str
    assignment: str
    score: float
    max_score: float
    status: str            # graded | missing | invalid | crashed | timeout | error | failed
    reason: str = ""
    seconds: float = 0.0
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)
    killed: list[str] = field(default_factory=list)  # cells that ended the kernel, not run

    @classmethod
    def from_dict(cls, d: dict) -> "Outcome":
        d = dict(d)
        d["cells"] = {k: tuple(v) for k, v in d.get("cells", {}).items()}
        return cls(**d)


def api(course: Path, extra=None):
    """nbgrader's Python API on this course, configured from its ``nbgrader_config.py``
    only (never ``~/.jupyter``), plus ``extra`` (a traitlets ``Config``)."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    cfg.CourseDirectory.root = str(course)
    if extra is not None:
        cfg.merge(extra)
    return NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)


def submission_sha256(course: Path, student: str, assignment: str,
                      limits: SubmissionLimits = SubmissionLimits()) -> str:
    """One digest of a submission as :mod:`..submission.intake` reads it (the accepted files' names and
    contents, what was refused and why); '' when missing. Never follows a link, never
    blocks (a named pipe is refused, not read)."""
    return intake.read(course, student, assignment, limits).digest()


def precheck(course: Path, student: str, assignment: str,
             limits: SubmissionLimits = SubmissionLimits()) -> tuple[str, str] | None:
    """``(status, reason)`` when the submission cannot be autograded at all."""
    return intake.check(intake.read(course, student, assignment, limits), course, limits)[0]


def log_name(student: str, assignment: str, suffix: str) -> str:
    """A log file's name for this job: the ids when they are valid ones, else a digest."""
    if intake.id_problem("student", student) or intake.id_problem("assignment", assignment):
        import hashlib
        return "job-" + hashlib.sha256(f"{student}\0{assignment}".encode(
            "utf-8", "surrogateescape")).hexdigest()[:16] + suffix
    return f"{student}-{assignment}{suffix}"


def _scores(cfg: GradingConfig, student: str, assignment: str) -> tuple[float, float, dict]:
    from nbgrader.api import MissingEntry

    with cfg.gradebook() as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return 0.0, gb.find_assignment(assignment).max_score, {}
        cells = {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades}
        return float(sub.score), float(sub.max_score), cells


def max_score(cfg: GradingConfig, assignment: str) -> float:
    with cfg.gradebook() as gb:
        return float(gb.find_assignment(assignment).max_score)


def _limit_note(ename: str, evalue: str, gid: str, cfg: GradingConfig) -> str | None:
    """The note for a cell that failed because it hit a limit of ``course.toml``."""
    from ..sandbox.setup import describe_limit_hit

    if ename == "CellTimeoutError":
        what = describe_limit_hit("KeyboardInterrupt", cfg.limits)
        return f"cell {gid}: {what} and the cell was stopped (an endless loop?)"
    what = describe_limit_hit(f"{ename}: {evalue}", cfg.limits)
    return f"cell {gid}: {what}" if what else None


def _gid(cell) -> str | None:
    meta = cell.get("metadata", {}).get("nbgrader")
    gid = meta.get("grade_id") if isinstance(meta, dict) else None
    return gid if isinstance(gid, str) else None


# a graded check's result as the notebook prints it (grader.checks.result.CheckResult.text)
_LOST = re.compile(r"^\[FAIL\] (?P<name>.+?): (?P<got>[0-9.]+)/(?P<top>[0-9.]+) - (?P<msg>.*)$")


def lost_points(text: str, gid: str) -> list[str]:
    """Each graded check of a test cell's printed output that lost points, as one note in
    full: its score, message and the lines below it (expected, seen, hint, further lost
    parts). A quick check's line carries no score and is not one of them."""
    notes, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        m = _LOST.match(line)
        if not m:
            continue
        more = []
        for follow in lines[i + 1:]:
            if not follow.startswith("  "):
                break
            more.append(" ".join(follow.split()))
        notes.append(f"test cell {gid}: {m['name']} {m['got']}/{m['top']}: {m['msg']}"
                     + "".join(f"; {x}" for x in more))
    return notes


def _said(text: str, width: int = 400) -> str:
    """A student's error text for a report: whole words, at most ``width`` characters."""
    return textwrap.shorten(" ".join(text.split()), width, placeholder=" [...]")


def _notes(course: Path, staged: Path, student: str, assignment: str,
           cfg: GradingConfig) -> list[str]:
    """What happened inside an autograded notebook that a student should be told
    (``staged``: the submission as nbgrader read it)."""
    from ..sandbox.outputs import CUT

    notes = []
    # Compare the submitted test cells with the released ones (nbgrader's own checksum
    # warning also fires for every cell that held hidden tests, so it cannot tell).
    for released in sorted((course / "release" / assignment).glob("*.ipynb")):
        want = {c.metadata["nbgrader"]["grade_id"]: c.source
                for c in nbformat.read(released, as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")}
        sub = nbformat.read(staged / released.name, as_version=4)
        have = {_gid(c): c.source for c in sub.cells}
        for gid, src in want.items():
            if gid not in have:
                notes.append(f"test cell {gid} was deleted; the original was put back and run")
            elif have[gid].strip() != src.strip():
                notes.append(f"test cell {gid} was edited; the original was put back and run")
    folder = course / "autograded" / student / assignment
    for path in sorted(folder.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            gid = _gid(cell) or f"{i + 1}"
            meta = cell.metadata.get("nbgrader")
            graded = isinstance(meta, dict) and meta.get("grade")
            for out in cell.get("outputs", []):
                text = str(out.get("text", "")) if out.get("output_type") == "stream" else ""
                if CUT in text and "was not read]" in text:
                    notes.append(f"cell {gid}: a message of its output was larger than the "
                                 "limit and was not read")
                elif CUT in text:
                    notes.append(f"cell {gid}: its output was cut (a notebook keeps at most "
                                 f"{cfg.limits.output_mb:g} MB of output)")
                if graded and text:
                    notes += lost_points(text, gid)
                if out.get("output_type") != "error":
                    continue
                ename, evalue = str(out.get("ename", "")), str(out.get("evalue", ""))
                limit = _limit_note(ename, evalue, gid, cfg)
                if limit:
                    notes.append(limit)
                elif crashes.KILLED in evalue:
                    pass  # a cell replaced after it ended the kernel: noted by grade_one
                elif graded:
                    msg = evalue.strip().splitlines()
                    notes.append(f"test cell {gid} failed with {_said(ename, 80)}"
                                 + (f": {_said(msg[0])}" if msg else ""))
    return list(dict.fromkeys(notes))


def _why_failed(log: str) -> tuple[str, str]:
    if "DeadKernelError" in log or "Kernel died" in log or "kernel died" in log.lower():
        return "crashed", ("the Python kernel died while running the notebook (os._exit, a "
                           "segmentation fault or memory exhausted outside Python)")
    if "UnresponsiveKernelError" in log:
        return "timeout", "the kernel stopped answering and could not be interrupted"
    last = [ln for ln in log.strip().splitlines() if "ERROR" in ln or "Error" in ln]
    return "error", "nbgrader could not grade it: " + (last[-1].strip()[:300] if last else "see the log")


def failure_page(course: Path, o: Outcome) -> None:
    """A feedback page with the score and the reason (none for an id that cannot name a
    folder: that submission's reason is in the reports)."""
    if intake.id_problem("student", o.student) or intake.id_problem("assignment", o.assignment):
        return
    folder = course / "feedback" / o.student / o.assignment
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.html"):
        old.unlink()
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(o.assignment)}: feedback"
            f"</title></head><body><h1>{html.escape(o.assignment)}</h1>"
            f"<p>Student: {html.escape(o.student)}</p>"
            f"<p><b>Score: {o.score:g} / {o.max_score:g}</b> ({html.escape(o.status)})</p>"
            + "".join(f"<p>{html.escape(part)}</p>" for part in o.reason.split("; ") if part)
            + ("<p>The detailed feedback page could not be made; the score above is recorded."
               "</p>" if o.status == "graded" else
               "<p>Nothing was graded beyond this point. Fix the problem and submit again, or "
               "ask your instructor.</p>")
            + "</body></html>\n")
    (folder / f"{o.assignment}.html").write_text(page)


def _note_box(course: Path, o: Outcome, notes: list[str]) -> None:
    """Say at the top of nbgrader's feedback page which cells ended the kernel and what of
    the submission was not read or was changed (``notes``)."""
    lines = list(notes)
    if o.killed:
        lines.insert(0, f"{', '.join(o.killed)} ended the Python kernel (os._exit, a crash "
                     "or a kill) while grading. "
                     + ("That cell was" if len(o.killed) == 1 else "Those cells were")
                     + " not run (scored 0, shown below as a RuntimeError); the other "
                     "cells were graded.")
    if not lines:
        return
    note = ("<div style='border:2px solid #c00;padding:0.5em;margin:1em'><b>Grading note:</b> "
            + "<br>".join(html.escape(line) for line in lines) + "</div>")
    for page in (course / "feedback" / o.student / o.assignment).glob("*.html"):
        text = page.read_text(encoding="utf-8")
        text, n = re.subn(r"(<body[^>]*>)", lambda m: m.group(1) + note, text, count=1)
        page.write_text(text if n else note + text, encoding="utf-8")


def _executor_config(trace: Path, skip: list[tuple[int, str]], cfg: GradingConfig,
                     staging: Path, starved_retry: bool = False, fair_cores: float = 1.0):
    """nbgrader config running :class:`~grader.grading.judge.executor.JudgedExecute` (crash-guarded,
    test cells judged outside the kernel) in place of ``Execute`` under this run's limits
    (:func:`~grader.grading.sandbox.crashes.autograde_config`), with the crash trace and the
    cells not to run, reading the submission from ``staging``."""
    from ..judge.executor import JudgedExecute

    c = crashes.autograde_config(cfg.limits, JudgedExecute, trace, skip, starved_retry,
                                 fair_cores)
    c.CourseDirectory.submitted_directory = str(staging)
    return c


class Watchdog:
    """Calls ``on_expire`` once if not stopped within ``seconds`` (the notebook limit)."""

    def __init__(self, seconds: float, on_expire: Callable[[], None]) -> None:
        self.expired = False
        self._timer = threading.Timer(max(0.0, seconds), self._fire, args=(on_expire,))
        self._timer.daemon = True

    def _fire(self, on_expire: Callable[[], None]) -> None:
        self.expired = True
        on_expire()

    def __enter__(self) -> "Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()


def grade_one(cfg: GradingConfig, student: str, assignment: str, *, kernel_config=None,
              kill_kernels: Callable[[], None] = lambda: None, logs: Path | None = None,
              kernel_end: Callable[[], str | None] = lambda: None,
              blame_machine: bool = True, fair_cores: float = 1.0, note: str = "") -> Outcome:
    """Grade one submission; ``kernel_config`` (traitlets Config) starts kernels in the
    sandbox; ``kill_kernels`` ends this worker's kernels when the notebook limit is hit;
    ``kernel_end`` says how the last kernel ended (a signal of a limit, see sandbox).
    Raises :class:`GradingFault` when the machine, not the submission, stopped it (one of
    :data:`MACHINE_FAULTS`), unless ``blame_machine`` is False (the job's last try: it is
    scored as it ran). ``fair_cores``: the job's share of the cores (bounds.starved);
    ``note``: a line for the grades and the feedback (the worker's, on a job's last try)."""
    course = cfg.course
    t0 = time.perf_counter()
    top = max_score(cfg, assignment)
    sub = intake.read(course, student, assignment, cfg.submission)
    bad, staged, notes = intake.check(sub, course, cfg.submission)   # notes: what was refused
    notes = [*notes, note] if note else notes
    if bad:
        o = Outcome(student, assignment, 0.0, top, *bad)
        o.reason = "; ".join([o.reason, *notes])
        failure_page(course, o)
        o.seconds = time.perf_counter() - t0
        return o
    # Private folders the kernel cannot see: the submission as nbgrader reads it, and where
    # this process notes the running cell.
    private = Path(tempfile.mkdtemp(prefix="grading-job-"))
    try:
        sub.stage(private / "submitted", staged)
        o = _autograde(cfg, sub, private, top, kernel_config, kill_kernels, logs, kernel_end,
                       blame_machine, fair_cores)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    o.reason = "; ".join(filter(None, [o.reason, *notes]))
    if o.status != "graded":
        failure_page(course, o)
    else:
        _feedback(cfg, o, logs, notes)
    o.seconds = time.perf_counter() - t0
    return o


def _autograde(cfg: GradingConfig, sub: intake.Submission, private: Path, top: float,
               kernel_config, kill_kernels, logs: Path | None, kernel_end,
               blame_machine: bool = True, fair_cores: float = 1.0) -> Outcome:
    course, lim = cfg.course, cfg.limits
    student, assignment = sub.student, sub.assignment
    skip: list[tuple[int, str]] = []  # (index, label) of cells that ended the kernel
    ended: dict[tuple[int, str], str | None] = {}   # how (a signal), where the sandbox saw it
    trace = private / "cell"
    out_folder = course / "autograded" / student / assignment
    source = overlay.source(course, assignment)      # the private overlay's, if it has one
    keep = set(sub.files) | {p.name for p in source.glob("*.ipynb")}
    keep |= {str(p.relative_to(source)) for p in source.rglob("*") if p.is_file()}
    log_all, fault = [], None
    job = bounds.Box.of_job() if blame_machine else None   # the worker's group of this job
    cpu = [job.cpu_sample() if job is not None else None]

    def expire() -> None:         # the notebook's limit: the group's accounting, then the kill
        cpu.append(job.cpu_sample() if job is not None else None)
        kill_kernels()

    with Watchdog(lim.notebook_timeout_s, expire) as dog:
        for attempt in range(crashes.MAX_ROUNDS):
            trace.unlink(missing_ok=True)
            extra = _executor_config(trace, skip, cfg, private / "submitted", blame_machine,
                                     fair_cores)
            if kernel_config is not None:
                extra.merge(kernel_config)
            res = api(course, extra).autograde(assignment, student, force=True, create=True)
            workdir.keep_only(out_folder, keep)
            log = (res.get("log") or "") + (res.get("error") or "")
            log_all.append(f"=== attempt {attempt + 1}, not running: "
                           f"{', '.join(label for _, label in skip) or 'none'}\n{log}\n")
            autograded = list(out_folder.glob("*.ipynb"))
            ok = res.get("success") and autograded
            if ok or dog.expired:
                break
            why = _why_failed(log)
            if why[0] != "crashed":
                break
            end = crashes.dead_cause(trace) or kernel_end()
            if end in MACHINE_FAULTS and blame_machine:
                fault = MACHINE_FAULTS[end]
                break
            dead = crashes.dead_cell(trace)
            if dead is None or dead in skip:
                break
            skip.append(dead)          # and grade again without it
            ended[dead] = end
    if logs is not None:
        (logs / log_name(student, assignment, ".log")).write_text("".join(log_all))
    if dog.expired and blame_machine and bounds.starved(cpu[0], cpu[-1], fair_cores):
        fault = MACHINE_FAULTS[bounds.STARVED]
    if fault:
        raise GradingFault(fault)
    if dog.expired:
        o = Outcome(student, assignment, 0.0, top, "timeout",
                    f"grading took longer than the {lim.notebook_timeout_s:g} s limit for a "
                    "notebook and was stopped")
    elif not ok:
        o = Outcome(student, assignment, 0.0, top, *_why_failed(log))
    else:
        score, top, cells = _scores(cfg, student, assignment)
        notes = [f"{label} ended the Python kernel ({_ended(ended.get((i, label)), cfg)}): "
                 "not run, scored 0" for i, label in skip]
        notes += _notes(course, private / "submitted" / student / assignment, student,
                        assignment, cfg)
        o = Outcome(student, assignment, score, top, "graded", "; ".join(notes), cells=cells,
                    killed=[label for _, label in skip])
    if o.status != "graded" and skip:
        o.reason += (" (graded without " + ", ".join(label for _, label in skip)
                     + ", which ended the kernel first)")
    return o


_FEEDBACK: dict = {}   # course -> OneStudentFeedback, kept for the worker's life


def _ended(signal_name: str | None, cfg: GradingConfig) -> str:
    from ..sandbox.setup import describe_limit_hit

    if signal_name == MACHINE_OOM:   # the job's last try: the machine's evidence, noted
        return ("killed by an out-of-memory killer while its memory limit was not reached, "
                "on every try")
    why = describe_limit_hit(signal_name, cfg.limits) if signal_name else None
    return why or "os._exit, a crash or a kill"


def feedback_writer(course: Path):
    """The course's feedback writer (templates compiled once), made on first use and kept
    for the process's life (the spawner makes it before it forks the workers)."""
    if course not in _FEEDBACK:
        from ..submission.feedback import OneStudentFeedback
        _FEEDBACK[course] = OneStudentFeedback(api(course))
    return _FEEDBACK[course]


def _feedback(cfg: GradingConfig, o: Outcome, logs: Path | None, notes: list[str]) -> None:
    """nbgrader's feedback page for one graded student (no kernel is involved), with a note
    of what was not read; when it cannot be written (in time), a page with the score."""
    course = cfg.course
    folder = course / "feedback" / o.student / o.assignment
    workdir.keep_only(folder, set())           # nothing of an earlier grading stays
    res = feedback_writer(course)(o.assignment, o.student, cfg.limits.feedback_timeout_s)
    pages = list(folder.glob("*.html"))
    if res.get("success") and pages:
        _note_box(course, o, notes)
        return
    name = log_name(o.student, o.assignment, ".feedback.log")
    if logs is not None:
        (logs / name).write_text((res.get("log") or "") + (res.get("error") or ""))
    why = "took too long" if "longer than" in (res.get("error") or "") else "failed"
    o.reason = "; ".join(filter(None, [o.reason, f"the feedback page {why} (see "
                                       f"reports/logs/{name}); a page with the score was "
                                       "written instead"]))
    failure_page(course, o)
