"""Results that ``grader.gpu_check`` recorded on a GPU and that were committed to
``bench/results/gpu/``. Chapters show them beside their live outputs, labelled with where
and when they were measured; with none committed, one sentence says so.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parents[2] / "bench" / "results" / "gpu"

__all__ = ["load_recorded", "recorded_label", "show_recorded"]


def load_recorded(directory: Path = RESULTS_DIR) -> list[dict]:
    """Committed GPU records, newest first; smoke tests (tiny or CPU-only runs) are skipped."""
    out = []
    for path in sorted(Path(directory).glob("*.json"), reverse=True):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not rec.get("tiny") and not rec.get("cpu_only") and rec.get("results"):
            rec["_path"] = path.name
            out.append(rec)
    return out


def recorded_label(rec: dict) -> str:
    return f"recorded on {rec['gpu_name']} on {rec['date'][:10]} by grader.gpu_check"


def show_recorded(experiment: str, framework: str, render: Any,
                  directory: Path = RESULTS_DIR) -> int:
    """Print each committed record of ``experiment`` for ``framework`` with its label,
    using ``render(result) -> str``; returns how many were shown."""
    # A framework that saw no GPU on the recording machine ran on CPU workers there: that is
    # not a GPU result, whatever machine it came from.
    recs = [r for r in load_recorded(directory)
            if experiment in r["results"].get(framework, {})
            and r["results"][framework].get("kind") != "cpu-workers"]
    if not recs:
        print("No GPU results are recorded yet (none committed in bench/results/gpu/): "
              "the outputs on this page are the live ones only.")
        return 0
    for rec in recs:
        res = rec["results"][framework]
        print(f"{recorded_label(rec)} ({res.get('devices', '')}):")
        print(render(res[experiment], res))
    return len(recs)
