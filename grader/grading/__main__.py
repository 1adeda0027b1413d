"""``python -m grader.grading`` (``make grade``): grade everything in exercises/submitted/."""
from __future__ import annotations

import argparse
import sys

from .pipeline import grade_course


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.grading", description=__doc__)
    p.add_argument("--course", default="exercises", help="nbgrader course directory")
    p.add_argument("--student", action="append", help="grade only this student (repeatable)")
    p.add_argument("--assignment", action="append", help="grade only this assignment (repeatable)")
    p.add_argument("--cell-timeout", type=int, default=60, help="seconds per cell (default 60)")
    p.add_argument("--notebook-timeout", type=float, default=900,
                   help="seconds for one student's assignment, kernel start included (default 900)")
    p.add_argument("--memory-gb", type=float, default=4.0,
                   help="address-space limit of the grading kernel in GB (default 4)")
    a = p.parse_args(argv)
    run = grade_course(a.course, only_students=a.student, only_assignments=a.assignment,
                       cell_timeout=a.cell_timeout, notebook_timeout=a.notebook_timeout,
                       memory_gb=a.memory_gb)
    print()
    print(run.table())
    print(f"\ngrades: {run.course / 'reports' / 'grades.csv'} (and nbgrader's export: "
          f"reports/nbgrader_grades.csv); feedback: {run.course / 'feedback'}/<student>/<assignment>/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
