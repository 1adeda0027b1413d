"""Book build times: a clean executed build and a cached rebuild (budgets: 7 min with the new chapters, and 30 s).

    .venv/bin/python bench/book_build.py [--builddir /tmp/bench-build]

Builds into a separate folder so the working copy's _build is left alone.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.build import ROOT, build  # noqa: E402
from grader.lab import cpu_cores, cpu_model, load_line  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--builddir", type=Path, default=Path("/tmp/course-bench-build"))
    args = ap.parse_args()
    shutil.rmtree(args.builddir, ignore_errors=True)
    print(f"machine: {cpu_cores()} cores ({cpu_model()})")
    print(load_line())
    clean = build(ROOT, args.builddir, quiet=True)
    print(f"clean executed build: {clean:6.1f} s  (budget 420 s: {clean / 420:.0%})")
    print(load_line())
    cached = build(ROOT, args.builddir, quiet=True)
    print(f"cached rebuild:       {cached:6.1f} s  (budget  30 s: {cached / 30:.0%})")


if __name__ == "__main__":
    main()
