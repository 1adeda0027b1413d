"""Where a chapter spends its execution time: each cell's seconds, slowest first.

    .venv/bin/python bench/cell_times.py chapters/tensor_parallel.md [--top 12]

Executes the page as the book build does (the same kernel, in the page's folder, with
the build's environment; what the page writes lands where a build puts it) and prints the
page's total, the load average before and after, and the cells that took longest, with
each cell's first line and tags.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.build import build_env  # noqa: E402
from grader.lab import load_line  # noqa: E402


def seconds(cell) -> float | None:
    """A cell's execution time from the timestamps nbclient records in its metadata."""
    ex = cell.get("metadata", {}).get("execution", {})
    start = ex.get("iopub.execute_input") or ex.get("iopub.status.busy")
    end = ex.get("shell.execute_reply") or ex.get("iopub.status.idle")
    if not (start and end):
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and of the children it has waited for (a cell's `!`
    commands, their launchers and ranks), from /proc; 0 where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    # utime, stime, cutime, cstime: fields 14-17 of stat(5), 12-15 after the name
    return sum(int(f) for f in fields[11:15]) / ticks


class CpuMeter:
    """nbclient hooks that note each cell's CPU seconds (the kernel and its children)."""

    def __init__(self) -> None:
        self.client, self.start, self.cpu = None, {}, {}

    def pid(self) -> int | None:
        process = getattr(getattr(self.client.km, "provisioner", None), "process", None)
        return getattr(process, "pid", None)

    def on_start(self, cell, cell_index) -> None:
        if (pid := self.pid()) is not None:
            self.start[cell_index] = cpu_seconds(pid)

    def on_done(self, cell, cell_index, execute_reply=None) -> None:
        if (pid := self.pid()) is not None and cell_index in self.start:
            self.cpu[cell_index] = cpu_seconds(pid) - self.start[cell_index]


def cell_rows(nb, cpu: dict | None = None) -> list[dict]:
    """One row per code cell: its index, seconds, CPU seconds (where measured), tags and
    first non-empty line."""
    rows = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        lines = [ln for ln in cell.source.splitlines() if ln.strip()]
        rows.append({"index": i, "seconds": seconds(cell), "cpu": (cpu or {}).get(i),
                     "tags": cell.get("metadata", {}).get("tags", []),
                     "first": lines[0][:70] if lines else ""})
    return rows


def table(rows: list[dict], top: int) -> str:
    timed = sorted(rows, key=lambda r: -(r["seconds"] or r.get("cpu") or 0))[:top]
    out = []
    for r in timed:
        tags = ",".join(r["tags"]) or "-"
        if r["seconds"] is None:        # no timestamps came back for this cell
            out.append(f"{'-':>7}   {r.get('cpu') or 0:6.1f} cpu-s  cell {r['index']:3d}  "
                       f"[{tags}]  {r['first']}")
            continue
        cpu = "     -    " if r.get("cpu") is None else f"{r['cpu']:6.1f} cpu-s"
        out.append(f"{r['seconds']:7.1f} s {cpu}  cell {r['index']:3d}  [{tags}]  "
                   f"{r['first']}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    import jupytext
    import nbclient

    ap = argparse.ArgumentParser()
    ap.add_argument("page", type=Path)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args(argv)
    page = args.page.resolve()
    nb = jupytext.read(page)
    print(f"{page.name}: {load_line()}")
    t0 = time.perf_counter()
    meter = CpuMeter()
    client = nbclient.NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(page.parent)}},
                                     record_timing=True, on_cell_start=meter.on_start,
                                     on_cell_executed=meter.on_done)
    meter.client = client
    env = build_env()
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)                  # the kernel inherits the build's environment
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    total = time.perf_counter() - t0
    rows = cell_rows(nb, meter.cpu)
    cpu = sum(r["cpu"] for r in rows if r["cpu"] is not None)
    print(f"{page.name}: {total:.1f} s in {len(rows)} code cells ({cpu:.1f} CPU seconds "
          f"in the kernel and what it ran); {load_line()}")
    print(table(rows, args.top))
    return rows


if __name__ == "__main__":
    main()
