"""Grading one student's assignment, in a grading worker's process (:mod:`.worker`).

Steps, for one (student, assignment):

1. pre-checks, without running anything: a missing assignment folder or notebook, or a
   notebook that is not valid JSON / nbformat, is recorded as zero with the reason;
2. nbgrader's ``autograde`` through its Python API, in this process (which never runs
   student code): the student's code runs in a kernel that :mod:`.sandbox` starts isolated and
   under the limits of ``course.toml``; the hidden tests run in the judge
   (:mod:`.judge`), outside the kernel. A kernel that dies (``os._exit``, a segfault, a
   limit) makes nbgrader drop the notebook, so the cell that was running is recorded (by
   :class:`~grader.grading.crashes.GuardedExecute`, in this process) and the student is graded
   again without it, up to ``crashes.MAX_ROUNDS`` attempts;
3. feedback for that student (hidden tests' code stripped), or a page saying what happened.

Submissions are only read, never changed. The result is an :class:`Outcome`.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from . import crashes
from .config import GradingConfig

__all__ = ["Outcome", "grade_one", "precheck", "submission_sha256", "api"]


@dataclass
class Outcome:
    student: str
    assignment: str
    score: float
    max_score: float
    status: str            # graded | missing | invalid | crashed | timeout | error
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


def submission_sha256(course: Path, student: str, assignment: str) -> str:
    """One digest of every file of a submission (names and contents); '' when missing."""
    import hashlib

    folder = course / "submitted" / student / assignment
    if not folder.is_dir():
        return ""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and ".ipynb_checkpoints" not in p.parts:
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def precheck(course: Path, student: str, assignment: str) -> tuple[str, str] | None:
    """``(status, reason)`` when the submission cannot be autograded at all."""
    folder = course / "submitted" / student / assignment
    if not folder.is_dir():
        return "missing", f"no submission: {folder.relative_to(course)} does not exist"
    for src in sorted((course / "source" / assignment).glob("*.ipynb")):
        nb_path = folder / src.name
        if not nb_path.exists():
            return "missing", f"notebook {src.name} is missing from the submission"
        try:
            json.loads(nb_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            where = f" at line {e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
            return "invalid", f"{src.name} is not valid JSON ({getattr(e, 'msg', e)}{where}); was it saved completely?"
        try:
            nb = nbformat.read(nb_path, as_version=4)
            nbformat.validate(nb)
        except Exception as e:  # noqa: BLE001 - nbformat raises several kinds
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return "invalid", f"{src.name} is not a valid notebook ({first[:200]})"
    return None


def _scores(db_url: str, student: str, assignment: str) -> tuple[float, float, dict]:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, "parallel-dl") as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return 0.0, gb.find_assignment(assignment).max_score, {}
        cells = {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades}
        return float(sub.score), float(sub.max_score), cells


def max_score(db_url: str, assignment: str) -> float:
    from nbgrader.api import Gradebook

    with Gradebook(db_url, "parallel-dl") as gb:
        return float(gb.find_assignment(assignment).max_score)


def _limit_note(ename: str, evalue: str, gid: str, cfg: GradingConfig) -> str | None:
    """The note for a cell that failed because it hit a limit of ``course.toml``."""
    from .sandbox import describe_limit_hit

    if ename == "CellTimeoutError":
        what = describe_limit_hit("KeyboardInterrupt", cfg.limits)
        return f"cell {gid}: {what} and the cell was stopped (an endless loop?)"
    what = describe_limit_hit(f"{ename}: {evalue}", cfg.limits)
    return f"cell {gid}: {what}" if what else None


def _notes(course: Path, student: str, assignment: str, cfg: GradingConfig) -> list[str]:
    """What happened inside an autograded notebook that a student should be told."""
    notes = []
    # Compare the submitted test cells with the released ones (nbgrader's own checksum
    # warning also fires for every cell that held hidden tests, so it cannot tell).
    for released in sorted((course / "release" / assignment).glob("*.ipynb")):
        want = {c.metadata["nbgrader"]["grade_id"]: c.source
                for c in nbformat.read(released, as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")}
        sub = nbformat.read(course / "submitted" / student / assignment / released.name, as_version=4)
        have = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in sub.cells}
        for gid, src in want.items():
            if gid not in have:
                notes.append(f"test cell {gid} was deleted; the original was put back and run")
            elif have[gid].strip() != src.strip():
                notes.append(f"test cell {gid} was edited; the original was put back and run")
    folder = course / "autograded" / student / assignment
    for path in sorted(folder.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id", cell.get("id", "?"))
            for out in cell.get("outputs", []):
                if out.get("output_type") != "error":
                    continue
                ename, evalue = str(out.get("ename", "")), str(out.get("evalue", ""))
                limit = _limit_note(ename, evalue, gid, cfg)
                if limit:
                    notes.append(limit)
                elif crashes.KILLED in evalue:
                    pass  # a cell replaced after it ended the kernel: noted by grade_one
                elif cell.metadata.get("nbgrader", {}).get("grade"):
                    msg = evalue.strip().splitlines()
                    notes.append(f"test cell {gid} failed with {ename}"
                                 + (f": {msg[0][:160]}" if msg else ""))
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
    folder = course / "feedback" / o.student / o.assignment
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.html"):
        old.unlink()
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{o.assignment}: feedback"
            f"</title></head><body><h1>{html.escape(o.assignment)}</h1>"
            f"<p>Student: {html.escape(o.student)}</p>"
            f"<p><b>Score: {o.score:g} / {o.max_score:g}</b> ({html.escape(o.status)})</p>"
            f"<p>{html.escape(o.reason)}</p>"
            "<p>Nothing was graded beyond this point. Fix the problem and submit again, or ask "
            "your instructor.</p></body></html>\n")
    (folder / f"{o.assignment}.html").write_text(page)


def _crash_note(course: Path, o: Outcome) -> None:
    """Say at the top of nbgrader's feedback page which cells ended the kernel."""
    note = ("<div style='border:2px solid #c00;padding:0.5em;margin:1em'><b>Grading note:</b> "
            + html.escape(f"{', '.join(o.killed)} ended the Python kernel (os._exit, a crash "
                          "or a kill) while grading. "
                          + ("That cell was" if len(o.killed) == 1 else "Those cells were")
                          + " not run (scored 0, shown below as a RuntimeError); the other "
                          "cells were graded.")
            + "</div>")
    for page in (course / "feedback" / o.student / o.assignment).glob("*.html"):
        text = page.read_text(encoding="utf-8")
        text, n = re.subn(r"(<body[^>]*>)", lambda m: m.group(1) + note, text, count=1)
        page.write_text(text if n else note + text, encoding="utf-8")


def _executor_config(trace: Path, skip: list[tuple[int, str]]):
    """nbgrader config running :class:`~grader.grading.judge.JudgedExecute` (crash-guarded,
    test cells judged outside the kernel) in place of ``Execute``, with the crash trace and
    the cells not to run."""
    from traitlets.config import Config

    from .judge import JudgedExecute

    c = Config()
    c.Autograde.autograde_preprocessors = crashes.chain(JudgedExecute)
    c.GuardedExecute.trace_file = str(trace)
    c.GuardedExecute.skip_cells = ",".join(str(i) for i, _ in skip)
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
              kernel_end: Callable[[], str | None] = lambda: None) -> Outcome:
    """Grade one submission; ``kernel_config`` (traitlets Config) starts kernels in the
    sandbox; ``kill_kernels`` ends this worker's kernels when the notebook limit is hit;
    ``kernel_end`` says how the last kernel ended (a signal of a limit, see sandbox)."""
    course, lim = cfg.course, cfg.limits
    t0 = time.perf_counter()
    top = max_score(cfg.db_url, assignment)
    bad = precheck(course, student, assignment)
    if bad:
        o = Outcome(student, assignment, 0.0, top, *bad)
        failure_page(course, o)
        o.seconds = time.perf_counter() - t0
        return o
    skip: list[tuple[int, str]] = []  # (index, label) of cells that ended the kernel
    ended: dict[tuple[int, str], str | None] = {}   # how (a signal), where the sandbox saw it
    # Where this process notes the running cell: a private folder the kernel cannot see.
    trace_dir = Path(tempfile.mkdtemp(prefix="grading-trace-"))
    trace = trace_dir / "cell"
    log_all = []
    with Watchdog(lim.notebook_timeout_s, kill_kernels) as dog:
        for attempt in range(crashes.MAX_ROUNDS):
            trace.unlink(missing_ok=True)
            extra = _executor_config(trace, skip)
            if kernel_config is not None:
                extra.merge(kernel_config)
            res = api(course, extra).autograde(assignment, student, force=True, create=True)
            log = (res.get("log") or "") + (res.get("error") or "")
            log_all.append(f"=== attempt {attempt + 1}, not running: "
                           f"{', '.join(label for _, label in skip) or 'none'}\n{log}\n")
            autograded = list((course / "autograded" / student / assignment).glob("*.ipynb"))
            ok = res.get("success") and autograded
            if ok or dog.expired:
                break
            why = _why_failed(log)
            dead = crashes.dead_cell(trace)
            if why[0] != "crashed" or dead is None or dead in skip:
                break
            skip.append(dead)          # and grade again without it
            ended[dead] = kernel_end()
    shutil.rmtree(trace_dir, ignore_errors=True)
    if logs is not None:
        (logs / f"{student}-{assignment}.log").write_text("".join(log_all))
    if dog.expired:
        o = Outcome(student, assignment, 0.0, top, "timeout",
                    f"grading took longer than the {lim.notebook_timeout_s:g} s limit for a "
                    "notebook and was stopped")
    elif not ok:
        o = Outcome(student, assignment, 0.0, top, *_why_failed(log))
    else:
        score, top, cells = _scores(cfg.db_url, student, assignment)
        notes = [f"{label} ended the Python kernel ({_ended(ended.get((i, label)), cfg)}): "
                 "not run, scored 0" for i, label in skip]
        notes += _notes(course, student, assignment, cfg)
        o = Outcome(student, assignment, score, top, "graded", "; ".join(notes), cells=cells,
                    killed=[label for _, label in skip])
    if o.status != "graded":
        if skip:
            o.reason += (" (graded without " + ", ".join(label for _, label in skip)
                         + ", which ended the kernel first)")
        failure_page(course, o)
    else:
        _feedback(course, o, logs)
    o.seconds = time.perf_counter() - t0
    return o


_FEEDBACK: dict = {}   # course -> OneStudentFeedback, kept for the worker's life


def _ended(signal_name: str | None, cfg: GradingConfig) -> str:
    from .sandbox import describe_limit_hit

    why = describe_limit_hit(signal_name, cfg.limits) if signal_name else None
    return why or "os._exit, a crash or a kill"


def _feedback(course: Path, o: Outcome, logs: Path | None) -> None:
    """nbgrader's feedback page for one graded student (no kernel is involved)."""
    if course not in _FEEDBACK:
        from .feedback import OneStudentFeedback
        _FEEDBACK[course] = OneStudentFeedback(api(course))
    res = _FEEDBACK[course](o.assignment, o.student)
    pages = list((course / "feedback" / o.student / o.assignment).glob("*.html"))
    if res.get("success") and pages:
        if o.killed:
            _crash_note(course, o)
        return
    if logs is not None:
        (logs / f"feedback-{o.student}-{o.assignment}.log").write_text(
            (res.get("log") or "") + (res.get("error") or ""))
    o.reason = "; ".join(filter(None, [o.reason, "feedback could not be generated (see "
                                       f"reports/logs/feedback-{o.student}-{o.assignment}.log)"]))
