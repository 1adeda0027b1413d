"""bench/cell_times.py: a page's cells, slowest first, from the timestamps nbclient
records and the CPU seconds read from /proc (no kernel started here)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("cell_times", ROOT / "bench" / "cell_times.py")
cell_times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cell_times)


def _cell(source, start=None, end=None, tags=()):
    c = nbformat.v4.new_code_cell(source)
    c.metadata["tags"] = list(tags)
    if start:
        c.metadata["execution"] = {"iopub.execute_input": start, "shell.execute_reply": end}
    return c


def test_cells_are_listed_slowest_first_with_their_tags_and_first_line():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# T"),
                _cell("x = 1", "2026-12-01T10:00:00.000Z", "2026-12-01T10:00:00.500Z"),
                _cell("\n!torchrun a.py", "2026-12-01T10:00:01Z", "2026-12-01T10:00:31Z",
                      ["torch"]),
                _cell("print(2)")]                      # no timestamps came back
    rows = cell_times.cell_rows(nb, {1: 0.4, 2: 20.0, 3: 1.0})
    assert [(r["index"], r["seconds"], r["cpu"]) for r in rows] == [
        (1, 0.5, 0.4), (2, 30.0, 20.0), (3, None, 1.0)]
    lines = cell_times.table(rows, 10).splitlines()
    assert "cell   2  [torch]  !torchrun a.py" in lines[0]
    assert "cell   3" in lines[1] and lines[1].lstrip().startswith("-")
    assert "cell   1  [-]  x = 1" in lines[2]


def test_cpu_seconds_of_this_process_grow_as_it_computes():
    before = cell_times.cpu_seconds(os.getpid())
    sum(i * i for i in range(3_000_000))
    assert cell_times.cpu_seconds(os.getpid()) > before
