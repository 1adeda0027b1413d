"""Grading a small class with and without attacks on the judge: time, and honest scores.

Builds a class of ``--students`` honest students (alice and bob alternating, assignment a1)
twice; the second copy also gets the judge attacks of ``tests/grading/attacks/judge_dos.py``
(a hash-collision reply of ``--collision-keys`` keys, JSON nested 200,000 deep, a 1 GiB
header, 2 million values, a 2,000-thread flood), one student each. Grades each copy with
the pipeline (``grade_course``: sandbox, judge, limits), alternating for ``--repeats``, and
prints both wall-clock times, the attack students' outcomes, and whether every honest student
got the same score in both. ``--plain`` instead grades each copy with plain sequential
``nbgrader autograde`` plus the judge (no pipeline, no sandbox) in one process, where a
frozen judge would freeze everyone after it.

It grades with whichever ``grader`` package Python imports: run it with ``PYTHONPATH`` set to
another checkout to measure that one (the attacks are this checkout's).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))      # after $PYTHONPATH: its grader is the one measured

A1 = "a1_independent_ops"


def make(course: Path, students: int, attacks: dict[str, str]) -> dict[str, str]:
    import nbformat

    from grading_class import make_class

    who = make_class(course, students, [A1], 0)
    alice = course / "submitted" / next(s for s, v in who.items() if v == "alice") / A1 / f"{A1}.ipynb"
    for name, code in attacks.items():
        nb = nbformat.read(alice, as_version=4)
        for c in nb.cells:
            if c.metadata.get("nbgrader", {}).get("grade_id") == "time_work":
                c.source = code
        out = course / "submitted" / f"x_{name}" / A1
        out.mkdir(parents=True)
        nbformat.write(nb, out / f"{A1}.ipynb")
        who[f"x_{name}"] = "attack"
    return who


def grade(course: Path, plain: bool, sandbox: str | None = None) -> tuple[float, dict]:
    from grading_class import scores

    t0 = time.perf_counter()
    if plain:
        from grader.grading.judge.executor import JudgedExecute
        from tests.grading.nbgrader_cli import autograde_options, nbgrader

        nbgrader(course, "generate_assignment", A1, "--force")
        nbgrader(course, "autograde", A1, "--force", *autograde_options(JudgedExecute, course / "trace"))
        return time.perf_counter() - t0, scores(course)
    from grader.grading.run.pipeline import grade_course

    run = grade_course(course, sandbox=sandbox, verbose=False)
    seconds = time.perf_counter() - t0
    return seconds, {(o.student, o.assignment): (o.score, o.status, o.reason[:120]) for o in run.outcomes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--collision-keys", type=int, default=50_000)
    ap.add_argument("--plain", action="store_true", help="nbgrader autograde + judge, no pipeline")
    ap.add_argument("--sandbox", choices=["auto", "bwrap", "none"],
                    help="the pipeline's isolation (default: course.toml's)")
    a = ap.parse_args()
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "judge_dos", HERE.parent / "tests" / "grading" / "attacks" / "judge_dos.py")
    judge_dos = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(judge_dos)

    attacks = {name: code for name, (code, _, _) in judge_dos.PAYLOADS.items()}
    attacks["hash_collision_reply"] = judge_dos.WRONG_TIME + judge_dos.collision_reply(a.collision_keys)
    import grader

    print(f"grader from {Path(grader.__file__).parent}; {a.students} honest students + "
          f"{len(attacks)} attacks; {'nbgrader + judge' if a.plain else 'pipeline'}; "
          f"sandbox {a.sandbox or 'as course.toml says'}; "
          f"{os.cpu_count()} cores", flush=True)
    times: dict[str, list[float]] = {"honest": [], "attacked": []}
    for rep in range(a.repeats):
        got = {}
        for kind in ("honest", "attacked") if rep % 2 == 0 else ("attacked", "honest"):
            with tempfile.TemporaryDirectory(prefix=f"bench-dos-{kind}-") as tmp:
                course = Path(tmp) / "course"
                who = make(course, a.students, attacks if kind == "attacked" else {})
                seconds, result = grade(course, a.plain, a.sandbox)
                times[kind].append(seconds)
                got[kind] = result
                print(f"[run {rep + 1}] {kind}: {len(who)} submissions in {seconds:.1f} s", flush=True)
                for key, value in sorted(result.items()):
                    if key[0].startswith("x_") or rep == 0:
                        print(f"    {key[0]:<24} {value}")
        honest = {k: v for k, v in got["honest"].items()}
        same = all(got["attacked"].get(k) == v for k, v in honest.items())
        print(f"[run {rep + 1}] every honest student scored the same beside the attacks: "
              + ("yes" if same else f"NO: {[(k, v, got['attacked'].get(k)) for k, v in honest.items() if got['attacked'].get(k) != v]}"),
              flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"median of {a.repeats}: honest {med['honest']:.1f} s, with the attacks "
          f"{med['attacked']:.1f} s (ranges {min(times['honest']):.1f}-{max(times['honest']):.1f}, "
          f"{min(times['attacked']):.1f}-{max(times['attacked']):.1f} s)")


if __name__ == "__main__":
    main()
