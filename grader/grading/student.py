"""The student version of an instructor notebook, made the way ``nbgrader
generate_assignment`` makes it, minus the gradebook: solutions replaced by stubs, hidden
tests removed, outputs cleared, checksums recomputed. The book links these (never the
instructor version); instructors release through nbgrader itself."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
from nbgrader.preprocessors import (CheckCellMetadata, ClearHiddenTests, ClearMarkScheme,
                                    ClearOutput, ClearSolutions, ComputeChecksums, LockCells)

# nbgrader's own order (converters/generate_assignment.py): ClearHiddenTests must come
# after the first ComputeChecksums, and ComputeChecksums must run again after it.
STEPS = [LockCells, ClearSolutions, ClearOutput, CheckCellMetadata, ComputeChecksums,
         ClearHiddenTests, ClearMarkScheme, ComputeChecksums, CheckCellMetadata]

__all__ = ["student_version", "assignment_info", "STEPS"]


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    resources: dict = {}
    for step in STEPS:
        nb, resources = step().preprocess(nb, resources)
    return nb


def assignment_info(path: Path) -> dict:
    """Title (first heading), the chapters it goes with (the italic line under the title)
    and the points of an instructor notebook."""
    nb = nbformat.read(path, as_version=4)
    title, goes_with = path.stem, ""
    for c in nb.cells:
        if c.cell_type != "markdown":
            continue
        for line in c.source.splitlines():
            if line.startswith("# ") and title == path.stem:
                title = line[2:].strip()
        # The italic "Goes with ..." span may run over several lines and end mid-line.
        found = re.search(r"(?<!\*)\*(Goes with.*?)\*(?!\*)", c.source, re.DOTALL)
        if found and not goes_with:
            goes_with = " ".join(found.group(1).split())
        if title != path.stem:
            break
    points = sum(float(c.metadata.get("nbgrader", {}).get("points", 0)) for c in nb.cells
                 if c.metadata.get("nbgrader", {}).get("grade"))
    return {"name": path.stem, "title": title, "goes_with": goes_with, "points": points}
