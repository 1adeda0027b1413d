"""Run every experiment of the parallel-computation chapters on the GPUs present and
record the results: ``python -m grader.gpu_check [--out PATH]`` (``make gpu-check``).

It first runs the chapters' GPU cells (:mod:`grader.lab.gpucells`; ``chapters/async.md``
and ``chapters/toolkit.md`` time on GPUs there, in the frameworks' own API), then, in
both frameworks, the experiments of ``chapters/multidevice.md`` and
``chapters/communication.md`` at the seed's sizes (50
products of 4000 x 4000 float32, keeping only the last result, so a device holds about
200 MB instead of 3.2 GB) and writes one JSON file (times, device name, driver and CUDA
versions, library versions, ISO date) to ``bench/results/gpu/<date>-<gpu>.json``. The
chapters show committed files beside their live outputs (:mod:`grader.lab.recorded`).

Without a GPU it stops with exit status 2 and says so. ``--allow-cpu --tiny`` runs the
same code on CPU with tiny sizes: a smoke test of the script (what its test does), never
a result to commit.
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
EXPERIMENTS = ("two_devices", "small_ops", "copy_overlap", "nonblocking_trap")
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


def run_framework(framework: str, tiny: bool) -> dict:
    """Every chapter experiment in one framework on the devices it gets; JSON-ready."""
    from grader.lab import get_backend, get_devices
    from grader.lab.experiments_comm import COPY_MODES, copy_overlap, nonblocking_read_trap
    from grader.lab.experiments_multi import StreamQueue, memory_plan, small_ops, two_devices, workload_size

    be = get_backend(framework)
    plan = get_devices(2, framework, verbose=False)
    n, products, why = workload_size(plan.simulated, tiny)
    rng = np.random.default_rng(0)
    data = rng.standard_normal((n, n), dtype=np.float32)
    out: dict[str, Any] = {"devices": plan.describe(), "kind": plan.kind, "n": n,
                           "products": products, "sizes": why}

    mr = two_devices(plan.devices, data, products)
    out["two_devices"] = {"first": _stats(mr.first), "second": _stats(mr.second),
                          "both": _stats(mr.both), "speedup": mr.speedup, "ideal": mr.ideal,
                          "overlap_s": mr.overlap_s, "span_s": mr.timeline.span(),
                          "memory": memory_plan(n, products)}

    spec = "gpu:0" if be.gpu_count() else "cpu"
    sizes = [(16 if tiny else 64, 64 if tiny else 2000), (64 if tiny else 2048, 4 if tiny else 16)]
    whole = StreamQueue(framework, spec, None)
    halves = [StreamQueue(framework, spec, be.new_stream(spec)) for _ in range(2)]
    out["small_ops"] = []
    for sn, count in sizes:
        r = small_ops(whole, halves, sn, count)
        out["small_ops"].append({"n": sn, "count": count, "one_at_a_time": _stats(r.one_at_a_time),
                                 "two_at_a_time": _stats(r.two_at_a_time), "speedup": r.speedup,
                                 "setting": f"{spec}: default stream vs two streams"})

    copies = min(products, 10)
    out["copy_overlap"] = {"spec": spec, "products": copies, "runs": []}
    for mode in COPY_MODES:
        c = copy_overlap(framework, spec, data, copies, mode)
        out["copy_overlap"]["runs"].append({"mode": mode, "total_s": c.total_s, "overlap_s": c.overlap_s,
                                            "correct": c.correct, "span_s": c.timeline.span()})
    out["nonblocking_trap"] = nonblocking_read_trap(framework, spec, data)
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
    args = ap.parse_args(argv)
    from grader.lab import get_backend

    frameworks = tuple(f for f in args.frameworks.split(",") if f)
    if not any(get_backend(fw).gpu_count() for fw in frameworks) and not args.allow_cpu:
        print("gpu_check: no GPU visible to " + " or ".join(frameworks) + ": nothing to record. "
              "Run it on a machine with a CUDA GPU (and the GPU builds of the frameworks; "
              "see README, 'GPU machines'), or pass --allow-cpu --tiny for a smoke test.",
              file=sys.stderr)
        return 2
    from grader.lab import gpucells

    # The chapters' own GPU cells first: each page's framework variant, top to bottom.
    written = gpucells.record_pages(frameworks=frameworks, out_dir=args.cells_out,
                                    allow_cpu=args.allow_cpu)
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
