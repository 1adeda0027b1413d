"""What an instructor watches while a class grades: a progress bar, then a summary.

On a terminal the bar redraws in place; in a log (CI, ``make grade > log``) each finished
job is one line, so nothing is lost and nothing floods.
"""
from __future__ import annotations

from pathlib import Path

import shutil
import statistics
import sys
import time
from collections import Counter
from typing import TextIO

from .item import Outcome

__all__ = ["Progress", "summary"]


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    def __init__(self, total: int, done_before: int = 0, stream: TextIO | None = None,
                 width: int = 28) -> None:
        self.total, self.before = total, done_before
        self.outcomes: dict[tuple[str, str], bool] = {}   # finished job -> graded?
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.width, self.t0 = width, time.monotonic()
        self.running: dict[int, str] = {}

    @property
    def done(self) -> int:
        """Jobs finished: each (student, assignment) once, however often it was finished
        (a job taken over after a lease ran out can be reported by two workers)."""
        return min(self.total, self.before + len(self.outcomes))

    @property
    def failed(self) -> int:
        return sum(not ok for ok in self.outcomes.values())

    def _line(self) -> str:
        frac = self.done / self.total if self.total else 1.0
        fill = int(round(frac * self.width))
        elapsed = time.monotonic() - self.t0
        new = self.done - self.before
        eta = ""
        if 0 < new and self.done < self.total:
            eta = f", about {_clock(elapsed / new * (self.total - self.done))} left"
        failed = f", {self.failed} not graded" if self.failed else ""
        return (f"[{'#' * fill}{'.' * (self.width - fill)}] {self.done}/{self.total} "
                f"({_clock(elapsed)}{eta}{failed})")

    def started(self, slot: int, what: str) -> None:
        self.running[slot] = what
        if self.tty:
            self._draw()

    def finished(self, slot: int, o: Outcome, recorded: bool = True) -> None:
        self.running.pop(slot, None)
        self.outcomes[(o.student, o.assignment)] = o.status == "graded"
        if self.tty:
            self._draw()
        else:
            mark = "" if recorded else "  (not recorded: another grader took this job over)"
            print(f"{self._line()}  {o.student} {o.assignment}: {o.score:g}/{o.max_score:g} "
                  f"{o.status} in {o.seconds:.1f} s{mark}", file=self.stream, flush=True)

    def _draw(self) -> None:
        now = "; ".join(self.running.values())
        self._redraw(self._line() + (f"  grading {now}" if now else ""))

    def _redraw(self, line: str) -> None:
        """Overwrite the bar's line, cut to the terminal's width (a longer one wraps)."""
        cols = shutil.get_terminal_size((100, 20)).columns - 1
        print("\r" + line[:cols].ljust(cols), end="", file=self.stream, flush=True)

    def note(self, text: str) -> None:
        if self.tty:
            self._redraw(f"{self._line()}  {text}")
        else:
            print(f"{self._line()}  {text}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=self.stream, flush=True)


def summary(outcomes: list[Outcome], wall_s: float | None = None, workers: int | None = None,
            now: set[tuple[str, str]] | None = None, course: Path | None = None) -> str:
    """Graded, failed and why, and time per student. ``now``: the (student, assignment)
    pairs graded by this run (the others were graded before and kept); ``course``: where the
    run looked, said when there was nothing to grade."""
    if not outcomes:
        if course is None:
            return "nothing to grade"
        return (f"nothing to grade: no submission in {course / 'submitted'}/<student>/"
                f"<assignment>/ for the assignments in {course / 'source'}/")
    status = Counter(o.status for o in outcomes)
    lines = [f"{len(outcomes)} submissions: " + ", ".join(f"{n} {s}" for s, n in status.most_common())]
    bad = [o for o in outcomes if o.status != "graded"]
    for o in bad:
        lines.append(f"  {o.status:<8} {o.student} {o.assignment}: {o.reason}")
    per_student: dict[str, float] = {}
    for o in outcomes:
        per_student[o.student] = per_student.get(o.student, 0.0) + o.seconds
    times = sorted(per_student.values())
    slowest = max(per_student, key=per_student.get)
    lines.append(f"time per student (all their assignments): median {statistics.median(times):.1f} s, "
                 f"mean {statistics.mean(times):.1f} s, slowest {slowest} {per_student[slowest]:.1f} s")
    if wall_s is not None:
        on = f" on {workers} workers" if workers else ""
        if now is None:
            work = sum(o.seconds for o in outcomes)
            lines.append(f"wall clock {wall_s:.1f} s for {work:.1f} s of grading{on}")
        else:
            fresh = [o for o in outcomes if (o.student, o.assignment) in now]
            kept = len(outcomes) - len(fresh)
            work = sum(o.seconds for o in fresh)
            lines.append(f"wall clock {wall_s:.1f} s: {len(fresh)} graded in this run "
                         f"({work:.1f} s of grading{on})"
                         + (f", {kept} graded before and kept (--regrade grades them again)"
                            if kept else ""))
    return "\n".join(lines)
