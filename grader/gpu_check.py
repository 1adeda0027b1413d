"""Record what the chapters' experiments do on a GPU: ``python -m grader.gpu_check``
(``make gpu-check``).

First, every chapter's GPU cells (:mod:`grader.lab.gpucells`): each page with a
``:gpu-cell:`` runs top to bottom in a plain Python namespace, once per framework with a
GPU, and what its GPU cells printed and drew is written to
``bench/results/gpu/cells/<page>.json`` with the machine's provenance. The chapters show
those records where the build machine has no GPU.

Then, unless ``--cells-only``, the experiment that ``chapters/async.md`` still runs
through the course's device interface (``timing``: cold, unsynchronized and
synchronized clocks) at the original section's sizes (50 products of 4000 x 4000
float32), written to ``bench/results/gpu/<date>-<gpu>.json`` (times, device name, driver
and CUDA versions, library versions, ISO date) and shown by :mod:`grader.lab.recorded`.

Without a GPU it stops with exit status 2 and says so. ``--allow-cpu`` (with ``--tiny``
for the timing run) runs the same code on CPU: a smoke test of the script, marked as
such, never a result to show.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results" / "gpu"
SCHEMA = 1
EXPERIMENTS = ("timing",)
REQUIRED = {"schema": int, "date": str, "gpu_name": str, "gpu_count": int, "driver": str,
            "cuda": dict, "versions": dict, "tiny": bool, "cpu_only": bool, "seconds": float,
            "results": dict}


def driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return ""


def _stats(s: Any) -> dict:
    return {"median_s": s.median, "min_s": s.min, "max_s": s.max, "samples": len(s.samples)}


def workload_size(gpu: bool, tiny: bool) -> tuple[int, int, str]:
    """``(n, products, why)``: the original section's sizes on a GPU, fewer on a CPU."""
    if tiny:
        return 64, 4, "tiny sizes (a smoke test of the code, not a measurement)"
    if gpu:
        return 4000, 50, "the original section's sizes"
    return 1024, 12, "scaled down for a CPU"


def run_framework(framework: str, tiny: bool) -> dict:
    """The timing experiment in one framework on the first device it gets; JSON-ready."""
    from grader.lab import get_devices
    from grader.lab.experiments_async import timing_pitfalls

    plan = get_devices(2, framework, verbose=False)
    n, products, why = workload_size(not plan.simulated, tiny)
    data = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    out: dict[str, Any] = {"devices": plan.describe(), "kind": plan.kind, "n": n,
                           "products": products, "sizes": why}
    tp = timing_pitfalls(plan[0], data, products)
    out["timing"] = {"cold_s": tp.cold_s, "unsynced_s": tp.unsynced_s, "synced": _stats(tp.synced)}
    return out


def record(frameworks: tuple[str, ...] = ("torch", "paddle"), tiny: bool = False) -> dict:
    """Run everything; return the record to write."""
    from grader.lab import get_backend

    t0 = time.perf_counter()
    gpus = {fw: get_backend(fw).gpu_count() for fw in frameworks}
    first = next((fw for fw in frameworks if gpus[fw]), None)
    rec = {
        "schema": SCHEMA,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu_name": get_backend(first).gpu_name(0) if first else "none (CPU)",
        "gpu_count": max(gpus.values()) if gpus else 0,
        "driver": driver_version(),
        "cuda": {fw: get_backend(fw).cuda_version() for fw in frameworks},
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     **{fw: get_backend(fw).version() for fw in frameworks}},
        "tiny": tiny, "cpu_only": first is None,
        "results": {fw: run_framework(fw, tiny) for fw in frameworks},
    }
    rec["seconds"] = time.perf_counter() - t0
    return rec


def validate(rec: dict) -> list[str]:
    """What is wrong with a record (empty when it is well formed)."""
    problems = [f"{k}: missing or not {t.__name__}" for k, t in REQUIRED.items()
                if not isinstance(rec.get(k), t)]
    for fw, res in (rec.get("results") or {}).items():
        missing = [e for e in EXPERIMENTS if e not in res]
        if missing:
            problems.append(f"results[{fw}] lacks {missing}")
    if not rec.get("results"):
        problems.append("no results")
    return problems


def default_path(rec: dict) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", rec["gpu_name"]).strip("-").lower() or "gpu"
    return RESULTS_DIR / f"{rec['date'][:10]}-{slug}.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", type=Path, help="where to write the JSON "
                    "(default bench/results/gpu/<date>-<gpu>.json)")
    ap.add_argument("--frameworks", default="torch,paddle")
    ap.add_argument("--allow-cpu", action="store_true", help="run without a GPU (a smoke test)")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke test)")
    ap.add_argument("--cells-only", action="store_true",
                    help="only run the chapters' GPU cells (grader.lab.gpucells)")
    ap.add_argument("--cells-out", type=Path, default=None,
                    help="folder for the GPU cells' records (default bench/results/gpu/cells)")
    ap.add_argument("--pages", default=None,
                    help="comma-separated chapter names whose GPU cells to run (default: "
                         "every chapter that has GPU cells; '' for none)")
    args = ap.parse_args(argv)
    from grader.lab import get_backend

    frameworks = []
    for fw in (f for f in args.frameworks.split(",") if f):
        try:
            get_backend(fw)
        except ImportError as exc:  # a GPU machine may carry one framework only
            print(f"gpu_check: {fw} cannot be imported here ({exc}): skipped",
                  file=sys.stderr)
        else:
            frameworks.append(fw)
    frameworks = tuple(frameworks)
    if not any(get_backend(fw).gpu_count() for fw in frameworks) and not args.allow_cpu:
        print("gpu_check: no GPU visible to " + " or ".join(frameworks) + ": nothing to record. "
              "Run it on a machine with a CUDA GPU (and the GPU builds of the frameworks; "
              "see README, 'GPU machines'), or pass --allow-cpu --tiny for a smoke test.",
              file=sys.stderr)
        return 2
    from grader.lab import gpucells

    # The chapters' own GPU cells first: each page's framework variant, top to bottom.
    pages = None
    if args.pages is not None:
        pages = [gpucells.CHAPTERS / f"{p.strip()}.md" for p in args.pages.split(",")
                 if p.strip()]
        missing = [p.stem for p in pages if not p.exists()]
        if missing:
            print(f"gpu_check: no chapter named {', '.join(missing)}", file=sys.stderr)
            return 2
    written = gpucells.record_pages(pages, frameworks=frameworks, out_dir=args.cells_out,
                                    allow_cpu=args.allow_cpu) if pages != [] else {}
    for page, path in written.items():
        print(f"gpu_check: GPU cells of {page} recorded in {path}")
    if args.cells_only:
        return 0
    rec = record(frameworks, args.tiny)
    problems = validate(rec)
    if problems:
        print("gpu_check: malformed record: " + "; ".join(problems), file=sys.stderr)
        return 1
    path = args.out or default_path(rec)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"gpu_check: {rec['gpu_name']}, {rec['seconds']:.0f} s; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
