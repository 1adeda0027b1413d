"""Time to autograde one student's full set of assignments (``make bench`` prints it).

Copies the course (sources and the shipped correct submission of ``alice``) to a
temporary directory and runs the instructor pipeline there, so ``exercises/`` is not
touched. Each assignment is autograded in its own nbgrader process with a fresh kernel;
the time includes generating the assignments, the feedback and the export.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from grader.grading.run.pipeline import grade_course

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--student", default="alice")
    a = ap.parse_args()
    src = ROOT / "exercises"
    mine = sorted(p.name for p in (src / "submitted" / a.student).iterdir() if p.is_dir())
    with tempfile.TemporaryDirectory() as tmp:
        course = Path(tmp)
        shutil.copy(src / "nbgrader_config.py", course)
        shutil.copytree(src / "hidden", course / "hidden")
        for name in mine:
            shutil.copytree(src / "source" / name, course / "source" / name)
            shutil.copytree(src / "submitted" / a.student / name,
                            course / "submitted" / a.student / name)
        t0 = time.perf_counter()
        run = grade_course(course, verbose=False)
        total = time.perf_counter() - t0
    for o in run.outcomes:
        print(f"  {o.assignment:<22} {o.score:g}/{o.max_score:g} {o.status:<8} autograde {o.seconds:5.1f} s")
    got = sum(o.score for o in run.outcomes)
    full = sum(o.max_score for o in run.outcomes)
    print(f"autograding {a.student}'s {len(mine)} assignments ({got:g}/{full:g} points): "
          f"{total:.1f} s in all, {sum(o.seconds for o in run.outcomes):.1f} s of it in autograde")


if __name__ == "__main__":
    main()
