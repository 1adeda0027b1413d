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
        _Kept.kept.template  # noqa: B018 - loads and compiles the templates
        self.warm = warm_exporter(_Kept.kept)   # before nbgrader's preprocessors join it
        for pp in self.app.preprocessors:
            _Kept.kept.register_preprocessor(pp)

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


def _warm_notebook():
    """A small notebook with what a feedback page shows: markdown, a graded test cell with
    stream, error and result outputs, an answer cell, HTML output."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    grade = {"grade": True, "solution": False, "locked": True, "grade_id": "warm_test",
             "points": 1, "score": 0, "schema_version": 3}
    answer = {"grade": False, "solution": True, "locked": False, "grade_id": "warm_answer",
              "schema_version": 3}
    return new_notebook(cells=[
        new_markdown_cell("# Warm-up\n\nSome *text*, `code`, a [link](#x) and $x^2$."),
        new_code_cell("import math\ndef f(x):\n    return math.sqrt(x)  # an answer",
                      metadata={"nbgrader": answer}, outputs=[
                          new_output("display_data", data={"text/html": "<b>html</b>",
                                                           "text/plain": "html"})]),
        new_code_cell("%time f(2)\nassert f(4) == 2, 'f(4)'\nprint('ok')",
                      metadata={"nbgrader": grade}, outputs=[
                          new_output("stream", name="stdout", text="ok\n"),
                          new_output("execute_result", data={"text/plain": "1.0"},
                                     execution_count=1),
                          new_output("error", ename="AssertionError", evalue="f(4)",
                                     traceback=["AssertionError: f(4)"])]),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                "language": "python"},
                 "language_info": {"name": "python", "pygments_lexer": "ipython3"}})


def warm_exporter(exporter) -> bool:
    """Render a small notebook once with ``exporter`` (the feedback's, before nbgrader's
    preprocessors are registered on it: they need a graded submission), so that what the
    first page loads lazily (the templates it includes, compiled into this exporter's
    Jinja environment; Pygments' IPython lexer and its patterns; the sanitizer's CSS
    selectors; Markdown) is loaded in this process before pages are written in its
    children. Each child otherwise loaded them again: 0.5-0.9 s of CPU per page instead of
    about 0.2 s. The page itself is thrown away; a failure only costs that time (False)."""
    try:
        exporter.from_notebook_node(_warm_notebook(), {"nbgrader": {
            "notebook": "warm-up", "score": 0, "max_score": 1, "late_penalty": 0}})
        return True
    except Exception:  # noqa: BLE001 - a warm-up only: each page still loads what it needs
        return False


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
