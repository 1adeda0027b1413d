"""The instructor's pipeline around nbgrader: grade everything in ``submitted/``.

For every assignment in ``source/`` and every student folder in ``submitted/``, in this
order (the order matters where it says so):

1. ``generate_assignment`` (all assignments, before any autograde: autograde needs the
   gradebook entries and the release checksums it writes); steps 1, 4 and 5 use nbgrader's
   Python API in this process, since they run no student code;
2. pre-checks, without running anything: a missing assignment folder or notebook, or a
   notebook that is not valid JSON / nbformat, is recorded as zero with the reason and not
   passed to nbgrader (which would stop on it);
3. ``autograde`` of that one student and assignment, in its own process group with a
   wall-clock limit, a memory limit (``RLIMIT_AS``, inherited by the kernel: an unbounded
   allocation ends in ``MemoryError`` in its cell, the other cells still run) and
   nbgrader's per-cell timeout (``Execute.timeout``). A kernel that dies (``os._exit``, a
   segfault) makes nbgrader drop the notebook, so autograde runs with
   :class:`~grader.grading.crashes.GuardedExecute`, which records (in nbgrader's process,
   not from anything the student's code prints) the cell being run; that cell is replaced
   by a ``raise RuntimeError`` in the copy nbgrader executes and the student is graded
   again (same limits, same gradebook row), so it scores 0 and the rest is graded. After
   ``crashes.MAX_ROUNDS`` attempts the whole notebook is recorded as zero with the reason;
4. ``generate_feedback`` for what autograded; hidden tests' code is stripped
   (``nbgrader_config.py``), their printed messages stay. For what did not, a feedback
   page saying what happened is written in the same place;
5. ``export`` of the gradebook to ``reports/nbgrader_grades.csv`` and this pipeline's own
   ``reports/grades.csv`` (one row per student and assignment, with status and reason).

Submissions are only read, never changed; one failure never stops the others.
"""
from __future__ import annotations

import csv
import html
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from . import crashes

__all__ = ["Outcome", "GradingRun", "grade_course", "assignments", "students"]


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


@dataclass
class GradingRun:
    course: Path
    outcomes: list[Outcome]

    def table(self) -> str:
        lines = [f"{'student':<10} {'assignment':<22} {'score':>11}  {'status':<8} reason"]
        for o in self.outcomes:
            lines.append(f"{o.student:<10} {o.assignment:<22} {o.score:>5g} / {o.max_score:<3g}  "
                         f"{o.status:<8} {o.reason}")
        return "\n".join(lines)

    def find(self, student: str, assignment: str) -> Outcome:
        return next(o for o in self.outcomes if (o.student, o.assignment) == (student, assignment))


def assignments(course: Path) -> list[str]:
    return sorted(p.name for p in (course / "source").iterdir()
                  if p.is_dir() and any(p.glob("*.ipynb")))


def students(course: Path) -> list[str]:
    sub = course / "submitted"
    return sorted(p.name for p in sub.iterdir() if p.is_dir()) if sub.is_dir() else []


def _env(cell_timeout: int) -> dict[str, str]:
    env = dict(os.environ)
    # nbgrader runs `alembic` by name; it lives beside this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["COURSE_CELL_TIMEOUT"] = str(cell_timeout)
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    env["MPLBACKEND"] = "Agg"
    return env


def _nbgrader(course: Path, args: list[str], env: dict[str, str], timeout: float,
              memory_bytes: int | None = None) -> tuple[int | None, str]:
    """Run one nbgrader command; ``None`` as the code means it ran past ``timeout`` and its
    whole process group (the kernel too) was killed."""
    def limits() -> None:
        if memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfault leaves no core file

    cmd = [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course}"]
    proc = subprocess.Popen(cmd, cwd=course, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=limits)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out


def _api(course: Path):
    """nbgrader's Python API on this course, configured from its ``nbgrader_config.py``
    only (never ``~/.jupyter``). Used for the steps that run no student code."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    cfg.CourseDirectory.root = str(course)
    return NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)


def _export(course: Path, to: Path) -> None:
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    with Gradebook(_db_url(course), "parallel-dl") as gb:
        CsvExportPlugin(to=str(to)).export(gb)


def _precheck(course: Path, student: str, assignment: str) -> tuple[str, str] | None:
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


def _scores(course: Path, student: str, assignment: str) -> tuple[float, float, dict]:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(_db_url(course), "parallel-dl") as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return 0.0, gb.find_assignment(assignment).max_score, {}
        cells = {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades}
        return float(sub.score), float(sub.max_score), cells


def _db_url(course: Path) -> str:
    return "sqlite:///" + str(course / "gradebook.db")


def _max_score(course: Path, assignment: str) -> float:
    from nbgrader.api import Gradebook

    with Gradebook(_db_url(course), "parallel-dl") as gb:
        return float(gb.find_assignment(assignment).max_score)


def _notes(course: Path, student: str, assignment: str, log: str, cell_timeout: int,
           memory_gb: float) -> list[str]:
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
                if out.get("ename") == "CellTimeoutError":
                    notes.append(f"cell {gid} ran longer than the {cell_timeout} s per-cell limit "
                                 "and was stopped (an endless loop?)")
                elif out.get("ename") == "MemoryError":
                    notes.append(f"cell {gid} ran out of memory (limit {memory_gb:g} GB) and was "
                                 "stopped")
                elif crashes.KILLED in str(out.get("evalue", "")):
                    pass  # a cell replaced after it ended the kernel: noted by grade_one
                elif cell.metadata.get("nbgrader", {}).get("grade"):
                    msg = str(out.get("evalue", "")).strip().splitlines()
                    notes.append(f"test cell {gid} failed with {out.get('ename')}"
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


def _failure_page(course: Path, o: Outcome) -> None:
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


def grade_one(course: Path, student: str, assignment: str, *, env: dict[str, str],
              cell_timeout: int, notebook_timeout: float, memory_gb: float,
              logs: Path) -> Outcome:
    t0 = time.perf_counter()
    max_score = _max_score(course, assignment)
    bad = _precheck(course, student, assignment)
    if bad:
        o = Outcome(student, assignment, 0.0, max_score, *bad)
        _failure_page(course, o)
        o.seconds = time.perf_counter() - t0
        return o
    skip: list[tuple[int, str]] = []  # (index, label) of cells that ended the kernel
    # Where nbgrader's process notes the running cell: a private folder the student's code
    # is not told about (the kernel runs in the autograded folder).
    trace_dir = Path(tempfile.mkdtemp(prefix="grading-trace-"))
    trace = trace_dir / "cell"
    for attempt in range(crashes.MAX_ROUNDS):
        trace.unlink(missing_ok=True)
        code, log = _nbgrader(course, ["autograde", assignment, "--student", student, "--force",
                                       *crashes.autograde_args(trace, skip)],
                              env, max(1.0, notebook_timeout - (time.perf_counter() - t0)),
                              int(memory_gb * 2**30))
        with open(logs / f"{student}-{assignment}.log", "w" if attempt == 0 else "a") as f:
            f.write(f"=== attempt {attempt + 1}, not running: "
                    f"{', '.join(label for _, label in skip) or 'none'}\n{log}\n")
        autograded = list((course / "autograded" / student / assignment).glob("*.ipynb"))
        if code is None or (code == 0 and autograded):
            break
        why = _why_failed(log)
        dead = crashes.dead_cell(trace)
        if why[0] != "crashed" or dead is None or dead in skip:
            break
        skip.append(dead)          # and grade again without it
    shutil.rmtree(trace_dir, ignore_errors=True)
    if code is None:
        o = Outcome(student, assignment, 0.0, max_score, "timeout",
                    f"grading took longer than the {notebook_timeout:g} s limit for a notebook "
                    "and was stopped")
    elif code != 0 or not autograded:
        o = Outcome(student, assignment, 0.0, max_score, *_why_failed(log))
    else:
        score, max_score, cells = _scores(course, student, assignment)
        notes = [f"{label} ended the Python kernel (os._exit, a crash or a kill): not run, "
                 "scored 0" for _, label in skip]
        notes += _notes(course, student, assignment, log, cell_timeout, memory_gb)
        o = Outcome(student, assignment, score, max_score, "graded", "; ".join(notes), cells=cells,
                    killed=[label for _, label in skip])
    if o.status != "graded":
        if skip:
            o.reason += (" (graded without " + ", ".join(label for _, label in skip)
                         + ", which ended the kernel first)")
        _failure_page(course, o)
    o.seconds = time.perf_counter() - t0
    return o


def grade_course(course: str | Path = "exercises", *, only_students: list[str] | None = None,
                 only_assignments: list[str] | None = None, cell_timeout: int = 60,
                 notebook_timeout: float = 900, memory_gb: float = 4.0,
                 verbose: bool = True) -> GradingRun:
    course = Path(course).resolve()
    env = _env(cell_timeout)
    reports = course / "reports"
    logs = reports / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    names = [a for a in assignments(course) if not only_assignments or a in only_assignments]
    os.environ["PATH"] = env["PATH"]  # nbgrader runs `alembic` by name, in this process too
    api = _api(course)
    for a in names:  # step 1, before any autograde
        res = api.generate_assignment(a, force=True)
        if not res["success"]:
            raise RuntimeError(f"generate_assignment {a} failed:\n{res.get('error', '')[-3000:]}")
    outcomes = []
    for s in [s for s in students(course) if not only_students or s in only_students]:
        for a in names:
            o = grade_one(course, s, a, env=env, cell_timeout=cell_timeout,
                          notebook_timeout=notebook_timeout, memory_gb=memory_gb, logs=logs)
            outcomes.append(o)
            if verbose:
                print(f"{s:<10} {a:<22} {o.score:>5g} / {o.max_score:<3g} {o.status:<8} "
                      f"{o.seconds:5.1f} s  {o.reason}", flush=True)
    # Step 4: feedback for everything that autograded, one nbgrader call per assignment in
    # this process (no kernel is involved); failures already have their page.
    for a in names:
        if not any(o.status == "graded" and o.assignment == a for o in outcomes):
            continue
        res = api.generate_feedback(a, force=True)
        if res["success"]:
            for o in outcomes:
                if o.assignment == a and o.killed:
                    _crash_note(course, o)
            continue
        (logs / f"feedback-{a}.log").write_text(res.get("log", "") + res.get("error", ""))
        for o in (o for o in outcomes if o.assignment == a):
            if o.status == "graded" and not list((course / "feedback" / o.student / o.assignment).glob("*.html")):
                o.reason = "; ".join(filter(None, [o.reason, "feedback could not be generated "
                                                   f"(see reports/logs/feedback-{a}.log)"]))
    run = GradingRun(course, outcomes)
    with open(reports / "grades.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "assignment", "score", "max_score", "status", "reason"])
        for o in outcomes:
            w.writerow([o.student, o.assignment, f"{o.score:g}", f"{o.max_score:g}", o.status, o.reason])
    (reports / "grades.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    _export(course, reports / "nbgrader_grades.csv")
    return run
