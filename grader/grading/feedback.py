"""Feedback shows what a hidden test said, never its code.

nbgrader's ClearHiddenTests empties the hidden part of a test cell's *source*, but when the
test raised, the cell's error output still holds IPython's traceback, which quotes the
failing lines of the cell, hidden ones included. :class:`StripTestTracebacks` cuts each
test cell's tracebacks down to ``ErrorName: message``: what went wrong, not how the test
is written. Stream and display outputs (the checks' messages) are kept.
"""
from __future__ import annotations

from nbconvert.preprocessors import Preprocessor


class StripTestTracebacks(Preprocessor):
    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources
