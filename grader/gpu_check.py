"""Record what the chapters' GPU cells do on a GPU: ``python -m grader.gpu_check``
(``make gpu-check``).

Every chapter with a ``:gpu-cell:`` (:mod:`grader.lab.core.gpucells`) runs top to bottom in a
plain Python namespace, once per framework that sees a GPU here, and what its GPU cells
printed and drew is written to ``bench/results/gpu/cells/<page>.json`` with the machine's
provenance (GPU, count, driver, CUDA and library versions, date, commit). The chapters
show those records where the build machine has no GPU. The code that runs is the code on
the page: the cells are read from the chapters' sources.

Without a GPU it stops with exit status 2 and says so. ``--allow-cpu`` runs the same
pages on the CPU: a smoke test of the cells, marked ``cpu_only`` in what it writes, and
never shown as a GPU result (write it elsewhere with ``--cells-out``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def usable_frameworks(names: list[str]) -> tuple[str, ...]:
    """The frameworks that import here (a GPU machine may carry only one)."""
    from grader.lab import get_backend

    out = []
    for fw in names:
        try:
            get_backend(fw).version()
        except ImportError as exc:
            print(f"gpu_check: {fw} cannot be imported here ({exc}): skipped",
                  file=sys.stderr)
        else:
            out.append(fw)
    return tuple(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frameworks", default="torch,paddle")
    ap.add_argument("--allow-cpu", action="store_true",
                    help="run without a GPU (a smoke test; never shown as a GPU result)")
    ap.add_argument("--cells-out", type=Path, default=None,
                    help="folder for the records (default bench/results/gpu/cells)")
    ap.add_argument("--pages", default=None,
                    help="comma-separated chapter names to run (default: every chapter "
                         "that has GPU cells)")
    ap.add_argument("--cells-only", action="store_true",
                    help="accepted for older scripts: GPU cells are all there is to run")
    args = ap.parse_args(argv)
    from grader.lab import get_backend
    from grader.lab.core import gpucells

    frameworks = usable_frameworks([f for f in args.frameworks.split(",") if f])
    if not any(get_backend(fw).gpu_count() for fw in frameworks) and not args.allow_cpu:
        print("gpu_check: no GPU visible to " + (" or ".join(frameworks) or "any framework")
              + ": nothing to record. Run it on a machine with a CUDA GPU (and the GPU "
              "builds of the frameworks; see README, 'GPU machines'), or pass --allow-cpu "
              "--cells-out DIR for a smoke test.", file=sys.stderr)
        return 2
    pages = None
    if args.pages is not None:
        pages = [gpucells.CHAPTERS / f"{p.strip()}.md" for p in args.pages.split(",")
                 if p.strip()]
        missing = [p.stem for p in pages if not p.exists()]
        if missing:
            print(f"gpu_check: no chapter named {', '.join(missing)}", file=sys.stderr)
            return 2
    written = gpucells.record_pages(pages, frameworks=frameworks, out_dir=args.cells_out,
                                    allow_cpu=args.allow_cpu)
    for page, path in written.items():
        print(f"gpu_check: GPU cells of {page} recorded in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
