"""What hostile submissions cost: the pre-check, and a class run with and without the attacks.

First the issue's 28.6 MB notebook of 10 million ``{}`` in its metadata goes through the
pre-check (``intake.read`` and ``intake.check``) five times, with the default limits and with
the notebook limit raised to 32 MB (so that the JSON check refuses it): the time of each
refusal and this process's peak memory. Then:

Builds two classes of ``--students`` honest students (copies of alice's and bob's
assignment 1, alternating) under the small limits of the attack corpus
(``tests/grading/attacks/hostile.py``: 1 MB of output per notebook, 300 files, 2 MB
notebooks...); the second class also holds every attack of that corpus. Grades each with
``/usr/bin/time -v python -m grader.grading --workers 2`` (runs interleaved, ``--repeats``
times), sampling every process of the run four times a second, and prints per run:

- the wall-clock time and the number of submissions;
- the peak resident memory of the largest grading worker, of the largest kernel, and of the
  whole process tree (sum), from the samples; and ``time``'s maximum RSS;
- whether every honest student got the same score in both classes.

Run it on a quiet machine: ``python bench/grading_attacks.py`` (a few minutes on 2 cores).
"""
from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.grading.submission import intake  # noqa: E402
from grader.grading.config import SubmissionLimits  # noqa: E402
from grader.grading.sandbox.procs import descendants  # noqa: E402
from tests.grading.attacks import hostile  # noqa: E402


def precheck() -> None:
    import resource

    import nbformat  # noqa: F401 - imported before the clock starts: not part of the check
    import numpy  # noqa: F401

    course = Path(tempfile.mkdtemp(prefix="bench-braces-"))
    try:
        folder = course / "submitted" / "s" / "a"
        folder.mkdir(parents=True)
        (course / "source" / "a").mkdir(parents=True)
        (course / "source" / "a" / "nb.ipynb").write_text("{}")
        (folder / "nb.ipynb").write_bytes(b'{"cells": [], "metadata": {"x": [' + b"{}," * 9_999_999
                                          + b'{}]}, "nbformat": 4, "nbformat_minor": 5}')
        size = (folder / "nb.ipynb").stat().st_size / 2**20
        for label, lim in (("default limits", SubmissionLimits()),
                           ("notebooks up to 32 MB", SubmissionLimits(max_notebook_mb=32))):
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                problem, _, _ = intake.check(intake.read(course, "s", "a", lim), course, lim)
                times.append(time.perf_counter() - t0)
            print(f"pre-check of a {size:.1f} MB notebook of 10 million {{}}, {label}: refused in "
                  f"{min(times):.2f}-{max(times):.2f} s (median {statistics.median(times):.2f} s): "
                  f"{problem[1][:80]}")
        print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB\n")
    finally:
        shutil.rmtree(course, ignore_errors=True)


def make_class(course: Path, n: int, attacks: bool) -> None:
    course.mkdir(parents=True)
    shutil.copy(ROOT / "exercises" / "nbgrader_config.py", course)
    (course / "course.toml").write_text(hostile.COURSE_TOML)
    shutil.copytree(ROOT / "exercises" / "source" / hostile.A1, course / "source" / hostile.A1)
    shutil.copytree(ROOT / "exercises" / "hidden", course / "hidden")
    for i in range(n):
        sample = ("alice", "bob")[i % 2]
        shutil.copytree(ROOT / "exercises" / "submitted" / sample / hostile.A1,
                        course / "submitted" / f"s{i:02d}_{sample}" / hostile.A1)
    if attacks:
        hostile.build(course)


def _rss_kb(pid: int) -> tuple[int, str]:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return 0, ""
    m = re.search(r"VmRSS:\s+(\d+) kB", status)
    return (int(m.group(1)) if m else 0), cmd


class Sampler(threading.Thread):
    """Peak RSS (MB) of the largest worker, the largest kernel and the whole tree."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.halt = pid, threading.Event()
        self.worker = self.kernel = self.tree = 0.0

    def run(self) -> None:
        while not self.halt.wait(0.25):
            total = 0
            for p in descendants(self.pid):
                kb, cmd = _rss_kb(p)
                total += kb
                if "grader.grading.run.worker" in cmd:
                    self.worker = max(self.worker, kb / 1024)
                elif "ipykernel_launcher" in cmd:
                    self.kernel = max(self.kernel, kb / 1024)
            self.tree = max(self.tree, total / 1024)


def grade(course: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    t0 = time.perf_counter()
    proc = subprocess.Popen(["/usr/bin/time", "-v", sys.executable, "-m", "grader.grading",
                             "--course", str(course), "--workers", "2"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(proc.pid)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    sampler.halt.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"grading {course} failed:\n{out[-2000:]}\n{err[-3000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    with open(course / "reports" / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    return {"wall": wall, "time_maxrss": int(m.group(1)) / 1024 if m else float("nan"),
            "worker": sampler.worker, "kernel": sampler.kernel, "tree": sampler.tree,
            "n": len(rows), "scores": {r["student"]: r["score"] for r in rows}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--students", type=int, default=4)
    p.add_argument("--repeats", type=int, default=1)
    a = p.parse_args()
    precheck()
    runs: dict[str, list[dict]] = {"honest": [], "attacks": []}
    base = Path(tempfile.mkdtemp(prefix="bench-attacks-"))
    try:
        for r in range(a.repeats):
            for kind in ("honest", "attacks"):
                course = base / f"{kind}{r}"
                make_class(course, a.students, kind == "attacks")
                runs[kind].append(grade(course))
                last = runs[kind][-1]
                print(f"{kind:<8} run {r + 1}: {last['n']} submissions in {last['wall']:.1f} s; "
                      f"peak RSS: largest worker {last['worker']:.0f} MB, largest kernel "
                      f"{last['kernel']:.0f} MB, whole run {last['tree']:.0f} MB "
                      f"(time -v max RSS {last['time_maxrss']:.0f} MB)", flush=True)
                shutil.rmtree(course, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()
    for kind, rs in runs.items():
        walls = [r["wall"] for r in rs]
        print(f"{kind:<8} wall {min(walls):.1f}-{max(walls):.1f} s (median "
              f"{statistics.median(walls):.1f} s), largest worker "
              f"{max(r['worker'] for r in rs):.0f} MB, largest kernel "
              f"{max(r['kernel'] for r in rs):.0f} MB, whole run {max(r['tree'] for r in rs):.0f} MB")
    same = all(h["scores"][s] == x["scores"][s] for h, x in zip(runs["honest"], runs["attacks"])
               for s in h["scores"])
    print("honest students' scores are the same with the attacks beside them:", same)


if __name__ == "__main__":
    main()
