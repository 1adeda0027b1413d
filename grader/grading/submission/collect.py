"""The instructor's side of :mod:`grader.handin`: ``nbgrader zip_collect`` with the course's
configuration (``exercises/nbgrader_config.py`` sets :data:`grader.handin.NAMED_REGEXP` and
this collector).

nbgrader's :class:`FileNameCollectorPlugin` reads the student id, the notebook and the time
from each extracted file's path. :class:`HandinCollector` does that and also skips, with a
warning naming both, a notebook handed in for another assignment than the one being
collected (a zip dropped into the wrong ``downloaded/<assignment>/archive/`` folder), and
one whose student id the grader could not use (``make grade`` would report it ``invalid``).
"""
from __future__ import annotations

from nbgrader.plugins.zipcollect import FileNameCollectorPlugin

from ..config import SubmissionLimits
from .intake import id_problem, shown

__all__ = ["HandinCollector"]


class HandinCollector(FileNameCollectorPlugin):
    def collect(self, submitted_file: str):
        info = super().collect(submitted_file)
        if not info:
            return info
        want = getattr(getattr(self.parent, "coursedir", None), "assignment_id", "")
        got = info.pop("assignment", None)
        if got is not None and want and got != want:
            self.log.warning("Skipped %s: handed in for assignment %s, not %s",
                             submitted_file, shown(got), shown(want))
            return None
        problem = id_problem("student", info.get("student_id") or "",
                             SubmissionLimits().max_id_length)
        if problem:
            self.log.warning("Skipped %s: %s", submitted_file, problem)
            return None
        return info
