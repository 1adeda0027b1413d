"""Grading a class: the pipeline's parallel workers against plain sequential nbgrader.

Builds a class of ``--students`` (default 30) from the shipped sample submissions
(alice: correct, bob: partly right, carol: broken in several ways: in a1 a function that
ends the kernel, which the pipeline grades without it, a retry per such cell), alternating
alice and bob with every ``--broken-every``-th student (default 10) a carol, for the
``--assignment`` list (default a1 and a8), in two fresh copies of the course. Then:

1. ``nbgrader autograde <assignment>`` once per assignment, every student in one process,
   one after another: what an instructor gets from nbgrader alone (hidden tests in the
   student's kernel, no isolation, no limits beyond the cell timeout);
2. ``grade_course(workers=N)``: sandboxed kernels, hidden tests in the judge, limits, and a
   feedback page per student.

Prints both wall-clock times, the ratio (the issue's target on 2 cores: at most 0.50),
the load average before and after each, and whether both gave every honest sample the same
score. With ``--feedback`` it also times plain ``nbgrader generate_feedback`` after plain
``autograde`` and prints the ratio against both together (what an instructor who wants
feedback pages runs; the pipeline writes them); the issue's figure stays the first ratio.
Run it on a quiet machine: ``python bench/grading_class.py`` (about 5 minutes for the
defaults on 2 cores). Where the CPU goes, by kind of process: ``bench/grading_cpu.py`` around
it, with ``--skip-plain`` or ``--skip-pipeline``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ["alice", "bob", "carol"]


def make_class(course: Path, n: int, names: list[str], broken_every: int) -> dict[str, str]:
    """Course folder with ``n`` students; returns student -> sample it copies."""
    src = ROOT / "exercises"
    course.mkdir(parents=True)
    for f in ("nbgrader_config.py", "course.toml"):
        shutil.copy(src / f, course)
    shutil.copytree(src / "hidden", course / "hidden")
    if course.name == "plain":   # nbgrader's own executor: the test cells in the kernel
        with open(course / "nbgrader_config.py", "a") as cfg:
            cfg.write("\nfrom nbgrader.preprocessors import Execute as _Execute\n"
                      "c.Autograde.autograde_preprocessors = _chain(_Execute)\n")
    for a in names:
        shutil.copytree(src / "source" / a, course / "source" / a)
    who = {}
    for i in range(n):
        sample = "carol" if broken_every and (i + 1) % broken_every == 0 else SAMPLES[i % 2]
        student = f"s{i + 1:02d}_{sample}"
        who[student] = sample
        for a in names:
            if (src / "submitted" / sample / a).is_dir():
                shutil.copytree(src / "submitted" / sample / a, course / "submitted" / student / a)
    return who


def plain_nbgrader(course: Path, names: list[str], steps=("generate_assignment", "autograde")) -> float:
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    t0 = time.perf_counter()
    for a in names:
        for step in steps:
            subprocess.run([sys.executable, "-m", "nbgrader", step, a, "--force",
                            f"--CourseDirectory.root={course}"],
                           cwd=course, env=env, check=False, capture_output=True)
    return time.perf_counter() - t0


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def scores(course: Path) -> dict[tuple[str, str], float]:
    from nbgrader.api import MissingEntry

    from grader.grading.config import load

    out = {}
    with load(course).gradebook() as gb:
        for a in gb.assignments:
            for s in gb.students:
                try:
                    out[(s.id, a.name)] = float(gb.find_submission(a.name, s.id).score)
                except MissingEntry:
                    pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--assignment", action="append")
    ap.add_argument("--workers", type=int, help="default: the pipeline's (two per core)")
    ap.add_argument("--broken-every", type=int, default=10,
                    help="every n-th student submits carol's broken notebooks (0: none)")
    ap.add_argument("--skip-plain", action="store_true", help="only time the pipeline")
    ap.add_argument("--skip-pipeline", action="store_true", help="only time plain nbgrader")
    ap.add_argument("--repeats", type=int, default=1, help="runs of both, alternating; medians printed")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--feedback", action="store_true",
                    help="also time plain nbgrader generate_feedback (a second ratio)")
    ap.add_argument("--sandbox", choices=["auto", "bwrap", "none"],
                    help="the pipeline's isolation (default: course.toml's)")
    a = ap.parse_args()
    names = a.assignment or ["a1_independent_ops", "a8_placements"]
    from grader.grading.run.pipeline import grade_course

    plains, ours_all = [], []
    for rep in range(a.repeats):
        with tempfile.TemporaryDirectory(prefix="bench-class-") as tmp:
            who = make_class(Path(tmp) / "plain", a.students, names, a.broken_every)
            make_class(Path(tmp) / "ours", a.students, names, a.broken_every)
            n_sub = sum(1 for _ in (Path(tmp) / "ours" / "submitted").glob("*/*"))
            if rep == 0:
                mix = {s: list(who.values()).count(s) for s in SAMPLES}
                print(f"class: {a.students} students ({mix}), {n_sub} submissions of {names}; "
                      f"{os.cpu_count()} cores", flush=True)
            plain = pages = None
            if not a.skip_plain:
                print(f"[run {rep + 1}] {load()}", flush=True)
                plain = plain_nbgrader(Path(tmp) / "plain", names)
                plains.append(plain)
                print(f"[run {rep + 1}] plain sequential nbgrader autograde: {plain:.1f} s ({load()})",
                      flush=True)
                if a.feedback:
                    pages = plain_nbgrader(Path(tmp) / "plain", names, ("generate_feedback",))
                    print(f"[run {rep + 1}] plain nbgrader generate_feedback after it: {pages:.1f} s "
                          f"({load()})", flush=True)
            if a.skip_pipeline:
                continue
            t0 = time.perf_counter()
            run = grade_course(Path(tmp) / "ours", workers=a.workers, sandbox=a.sandbox,
                               verbose=not a.quiet)
            ours = time.perf_counter() - t0
            ours_all.append(ours)
            print(f"[run {rep + 1}] pipeline, {run.workers} workers (sandbox, judge, limits, feedback): "
                  f"{ours:.1f} s ({load()})")
            print(run.summary())
            if plain and pages is not None:
                print(f"[run {rep + 1}] ratio pipeline / plain autograde + generate_feedback: "
                      f"{ours / (plain + pages):.3f}")
            if plain:
                print(f"[run {rep + 1}] ratio pipeline / plain nbgrader autograde: {ours / plain:.3f} "
                      "(target <= 0.50)")
                base = scores(Path(tmp) / "plain")
                differ = [(o.student, o.assignment, o.score, base.get((o.student, o.assignment)))
                          for o in run.outcomes if who[o.student] != "carol"
                          and base.get((o.student, o.assignment)) != o.score]
                print("honest samples (alice, bob) scored the same by both: "
                      + ("yes" if not differ else f"NO: {differ[:5]}"), flush=True)
    if plains and len(plains) > 1:
        import statistics
        ratios = [o / p for o, p in zip(ours_all, plains)]
        print(f"median of {len(plains)} runs: plain {statistics.median(plains):.1f} s, pipeline "
              f"{statistics.median(ours_all):.1f} s, ratio {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
