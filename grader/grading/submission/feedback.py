"""Feedback shows what a hidden test said, never its code; one page cannot hold a worker.

nbgrader's ClearHiddenTests empties the hidden part of a test cell's *source*, but when the
test raised, the cell's error output still holds IPython's traceback, which quotes the
failing lines of the cell, hidden ones included. :class:`StripTestTracebacks` cuts each
test cell's tracebacks down to ``ErrorName: message``: what went wrong, not how the test
is written. Stream and display outputs (the checks' messages) are kept.

A student's own cell that holds ``BEGIN HIDDEN TESTS`` without its end made nbgrader's
ClearHiddenTests raise and no feedback was written: :class:`ClearHiddenTestsSafely` leaves
such a cell (the student's code, not a test) as it is. :class:`OneStudentFeedback` writes
each page in a child process that is killed past ``feedback_timeout_s``.
"""
from __future__ import annotations

import json
import os
import select
import signal
import time

from nbconvert.preprocessors import Preprocessor
from nbgrader.preprocessors import ClearHiddenTests


class StripTestTracebacks(Preprocessor):
    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources


class ClearHiddenTestsSafely(ClearHiddenTests):
    """nbgrader's ClearHiddenTests; a cell whose markers do not pair up is left as it is
    (test cells hold the instructor's source, restored by autograde: theirs always do)."""

    def preprocess_cell(self, cell, resources, cell_index):
        try:
            return super().preprocess_cell(cell, resources, cell_index)
        except RuntimeError:
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
        # made and compiled here, once: each page is written in a child of this process
        _Kept.kept = self.app.exporter_class(parent=self.app, config=self.app.config)
        for pp in self.app.preprocessors:
            _Kept.kept.register_preprocessor(pp)
        _Kept.kept.template  # noqa: B018 - loads and compiles the templates

    def __call__(self, assignment: str, student: str, timeout: float = 120.0) -> dict:
        """nbgrader's result (``success``, ``log``, ``error``) for one page; a page not
        written within ``timeout`` seconds fails with a reason saying so."""
        from nbgrader.apps.api import capture_log
        from nbgrader.utils import temp_attrs

        def page() -> dict:
            with temp_attrs(self.app.coursedir, assignment_id=assignment, student_id=student):
                return capture_log(self.app)

        got = in_child(page, timeout)
        if got is None:
            return {"success": False, "log": "", "error": f"feedback took longer than "
                    f"{timeout:g} s and was stopped"}
        return got


def in_child(fn, timeout: float) -> dict | None:
    """``fn()`` (a dict of strings and flags) run in a forked child process; None if it did
    not finish within ``timeout`` seconds (the child is killed) or died."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: never returns into the caller's code
        code = 1
        try:
            os.close(r)
            res = fn()
            data = json.dumps({"success": bool(res.get("success")),
                               "log": str(res.get("log") or "")[-50_000:],
                               "error": str(res.get("error") or "")[-50_000:]}).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    chunks, end = [], time.monotonic() + timeout
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                return None
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return None
