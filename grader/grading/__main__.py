"""``python -m grader.grading`` (``make grade``): grade every submission in exercises/submitted/.

Limits, isolation, the gradebook URL and the number of workers come from the course's
``course.toml``; the options below override single values for one run. Interrupt it with
Ctrl-C at any time: finished grades are kept and running it again finishes the class.
"""
from __future__ import annotations

import argparse
import sys

if __name__ == "__main__":   # as in each worker (grader/grading/run/worker.py): ~1 s of CPU
    sys.modules.setdefault("rfc3987_syntax", None)   # type: ignore[arg-type]

from .config import WORKERS_PER_CORE
from .run.pipeline import grade_course


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.grading", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--course", default="exercises", help="nbgrader course directory")
    p.add_argument("--student", action="append", help="grade only this student (repeatable; a name with no folder in submitted/ is an error that lists those there are)")
    p.add_argument("--assignment", action="append", help="grade only this assignment (repeatable; a name not in source/ is an error that lists those there are)")
    p.add_argument("--workers", type=int, help="students graded at once (default: course.toml's "
                   f"workers, else {WORKERS_PER_CORE} per core)")
    p.add_argument("--regrade", action="store_true",
                   help="grade the selected submissions again even if they are graded already")
    p.add_argument("--cell-timeout", type=int, help="seconds per cell")
    p.add_argument("--notebook-timeout", type=float, help="seconds for one student's assignment")
    p.add_argument("--memory-gb", type=float, help="address-space limit of the grading kernel in GB")
    p.add_argument("--sandbox", choices=["auto", "bwrap", "none"],
                   help='isolation of student kernels ("none": only for code you trust)')
    p.add_argument("--table", action="store_true", help="print every grade at the end")
    a = p.parse_args(argv)
    try:
        run = grade_course(a.course, only_students=a.student, only_assignments=a.assignment,
                           cell_timeout=a.cell_timeout, notebook_timeout=a.notebook_timeout,
                           memory_gb=a.memory_gb, workers=a.workers, sandbox=a.sandbox,
                           regrade=a.regrade)
    except KeyboardInterrupt:
        print("\ninterrupted: every finished grade is kept; run the same command again to "
              "grade the rest", file=sys.stderr)
        return 130
    except (RuntimeError, ValueError, SystemExit) as e:
        print(f"\ngrading failed: {e}", file=sys.stderr)
        return 1
    print()
    if a.table:
        print(run.table(), "\n")
    print(run.summary())
    print(f"\ngrades: {run.course / 'reports' / 'grades.csv'} (and nbgrader's export: "
          f"reports/nbgrader_grades.csv); feedback: {run.course / 'feedback'}/<student>/<assignment>/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
