"""Feedback shows what a hidden test said, never its code.

nbgrader's ClearHiddenTests empties the hidden part of a test cell's *source*, but when the
test raised, the cell's error output still holds IPython's traceback, which quotes the
failing lines of the cell, hidden ones included. :class:`StripTestTracebacks` cuts each
test cell's tracebacks down to ``ErrorName: message``: what went wrong, not how the test
is written. Stream and display outputs (the checks' messages) are kept.
"""
from __future__ import annotations

import os

from nbconvert.preprocessors import Preprocessor


class StripTestTracebacks(Preprocessor):
    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources


class OneStudentFeedback:
    """nbgrader's ``generate_feedback`` for one student at a time, as a grading worker needs
    it, keeping one HTML exporter (its compiled Jinja templates and preprocessors) across
    calls: a fresh ``GenerateFeedback`` per student recompiles the templates, about a fifth
    of the time a small notebook takes to grade."""

    def __init__(self, nbgrader_api) -> None:
        from nbgrader.converters import GenerateFeedback
        from nbconvert.writers import FilesWriter

        class _Kept(GenerateFeedback):
            kept = None

            def start(self) -> None:  # BaseConverter.start, with the exporter made once
                self.init_notebooks()
                self.writer = FilesWriter(parent=self, config=self.config)
                if _Kept.kept is None:
                    _Kept.kept = self.exporter_class(parent=self, config=self.config)
                    for pp in self.preprocessors:
                        _Kept.kept.register_preprocessor(pp)
                self.exporter = _Kept.kept
                here = os.getcwd()
                os.chdir(self.coursedir.root)
                try:
                    self.convert_notebooks()
                finally:
                    os.chdir(here)

        self.api = nbgrader_api
        self.app = _Kept(coursedir=nbgrader_api.coursedir, parent=nbgrader_api)
        self.app.force = True

    def __call__(self, assignment: str, student: str) -> dict:
        from nbgrader.apps.api import capture_log
        from nbgrader.utils import temp_attrs

        with temp_attrs(self.app.coursedir, assignment_id=assignment, student_id=student):
            return capture_log(self.app)
