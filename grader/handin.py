"""Hand in an exercise from outside the course's hub: one command makes the zip that the
student uploads to the course's platform (Moodle, a shared drive, e-mail).

    python -m grader.handin a1_independent_ops --student YOUR_ID

run in the notebook's folder (in a terminal, or in a notebook cell with ``!`` in front),
after saving the notebook. It writes ``a1_independent_ops-YOUR_ID-<UTC time>.zip`` next to
it, holding one file::

    handin/student=YOUR_ID/assignment=a1_independent_ops/time=20261202T001500Z/a1_independent_ops.ipynb

The id and the time in that path are the student's *claim*, nothing more: the instructor's
collect step (:mod:`grader.grading.submission.collect`) takes whose it is and when it came
from the platform, and refuses a zip whose claim names another student or assignment
(:data:`CLAIM` reads it), so a zip cannot hand in for someone else. A time written by the
student's clock is never used.

It refuses, with a message saying what to do: a missing notebook (naming the notebooks the
folder does have), a file that is not a notebook, a notebook that is not this course's
notebook of that assignment, one over the grader's size limit, and a student or assignment
id the grader cannot use (:func:`grader.grading.submission.intake.id_problem`). It cannot see
unsaved work in a browser: it prints when the notebook was last saved and how many answer
cells still hold the stub, so the student can tell. Only the standard library is used: it
runs in a student's environment, which has no nbgrader.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .grading.config import SubmissionLimits
from .grading.submission.intake import id_problem

__all__ = ["handin", "HandinError", "Handin", "CLAIM", "member_name", "main"]

#: The claim in a zip's member path (:func:`member_name`): ``student``, ``assignment`` and
#: ``time`` as the student's zip says them. Any name between the slashes is read, so that a
#: claim the grader could not use as an id is still compared with the platform's owner.
CLAIM = re.compile(r"(?:[^/]+/)*handin/student=(?P<student>[^/]+)/assignment=(?P<assignment>[^/]+)"
                   r"/time=(?P<time>\d{8}T\d{6}Z)/(?P<notebook>[^/]+\.ipynb)\Z")
STUB = "raise NotImplementedError()"   # nbgrader's code stub in this course (nbgrader_config.py)


class HandinError(Exception):
    """What the hand-in cannot do, said so that the student knows what to do instead."""


@dataclass
class Handin:
    zip_path: Path
    member: str
    notebook: Path
    saved_ago_s: float
    answers: int
    stubs: list[str]

    def summary(self) -> str:
        ago = _ago(self.saved_ago_s)
        lines = [f"handed in {self.notebook.name} (saved {ago}) as {self.zip_path}",
                 f"  inside: {self.member}"]
        if self.stubs:
            lines.append(f"  {len(self.stubs)} of {self.answers} answer cells still hold "
                         f"'{STUB}' ({', '.join(self.stubs)}): if you answered them in the "
                         "browser, save the notebook (Ctrl-S) and run this again")
        else:
            lines.append(f"  all {self.answers} answer cells are filled in")
        lines.append("Upload this zip the way your instructor asked, logged in as yourself "
                     "(it holds only the notebook); to hand in again, make a new zip and "
                     "upload it: the newest your instructor's platform received counts.")
        return "\n".join(lines)


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{max(seconds, 0):.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def member_name(student: str, assignment: str, stamp: str, notebook: str) -> str:
    """The notebook's path inside the zip (what :data:`CLAIM` reads)."""
    return f"handin/student={student}/assignment={assignment}/time={stamp}/{notebook}"


def _assignments_named(cells: list) -> set[str]:
    """The assignments a notebook's code imports the checks of (``from grader.checks
    import aN_... as checks``)."""
    names = set()
    for c in cells:
        if isinstance(c, dict) and c.get("cell_type") == "code":
            src = c.get("source", "")
            src = "".join(src) if isinstance(src, list) else str(src)
            names.update(re.findall(r"from grader\.checks import (a\d+_\w+)", src))
    return names


def _answer_cells(cells: list) -> tuple[int, list[str]]:
    answers, stubs = 0, []
    for c in cells:
        meta = (c.get("metadata") or {}).get("nbgrader") if isinstance(c, dict) else None
        if isinstance(meta, dict) and meta.get("solution") and c.get("cell_type") == "code":
            answers += 1
            src = c.get("source", "")
            src = "".join(src) if isinstance(src, list) else str(src)
            if STUB in src:
                stubs.append(str(meta.get("grade_id", "?")))
    return answers, stubs


def handin(assignment: str, student: str, notebook: str | os.PathLike | None = None,
           out_dir: str | os.PathLike | None = None, now: float | None = None) -> Handin:
    """Write the hand-in zip of ``assignment``'s notebook (default: ``<assignment>.ipynb``
    in the current folder) for ``student`` into ``out_dir`` (default: the notebook's
    folder). Raises :class:`HandinError` saying why it cannot."""
    limits = SubmissionLimits()
    for kind, name in (("student", student), ("assignment", assignment)):
        problem = id_problem(kind, name or "", limits.max_id_length)
        if problem:
            raise HandinError(f"{problem}: the grader files your work under it. Use the id "
                              "your instructor gave you" if kind == "student" else problem)
    path = Path(notebook) if notebook else Path(f"{assignment}.ipynb")
    if not path.is_file():
        here = path.parent if str(path.parent) else Path(".")
        found = sorted(p.name for p in here.glob("*.ipynb")) if here.is_dir() else []
        raise HandinError(
            f"no notebook {path} (looked in {here.resolve()}): run this in the notebook's "
            "folder, or name the notebook with --notebook PATH"
            + (f"; this folder has {', '.join(found)}" if found else ""))
    size_mb = path.stat().st_size / 2**20
    if size_mb > limits.max_notebook_mb:
        raise HandinError(
            f"{path} is {size_mb:.1f} MB; the grader reads notebooks of at most "
            f"{limits.max_notebook_mb:g} MB. Clear its outputs (Edit > Clear Outputs of All "
            "Cells), save, and run this again")
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise HandinError(f"{path} is not a notebook (not JSON: {e}); if Jupyter still "
                          "opens it, save it again from there") from None
    if not isinstance(nb, dict) or nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        raise HandinError(f"{path} is not a Jupyter notebook of format 4")
    named = _assignments_named(nb["cells"])
    if not named or not any((c.get("metadata") or {}).get("nbgrader")
                            for c in nb["cells"] if isinstance(c, dict)):
        raise HandinError(f"{path} is not one of the course's exercise notebooks (it has no "
                          "graded cells, or does not import its assignment's checks): hand in "
                          "the notebook you downloaded from the book and worked in")
    if assignment not in named:
        raise HandinError(f"{path} is the notebook of {', '.join(sorted(named))}, not of "
                          f"{assignment}: name the assignment it belongs to, or the right "
                          "notebook with --notebook PATH")
    answers, stubs = _answer_cells(nb["cells"])
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    released = f"{assignment}.ipynb"   # each assignment has one notebook, named after it
    member = member_name(student, assignment, stamp, released)
    out = Path(out_dir) if out_dir else path.resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    zip_path = out / f"{assignment}-{student}-{stamp}.zip"
    tmp = zip_path.with_name(zip_path.name + ".part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo(member, time.gmtime(now)[:6]), path.read_bytes(),
                   compress_type=zipfile.ZIP_DEFLATED)
    tmp.replace(zip_path)
    return Handin(zip_path, member, path, now - path.stat().st_mtime, answers, stubs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m grader.handin",
        description="Make the zip that hands in an exercise notebook: upload it to your "
                    "course's platform as yourself. Save the notebook first.")
    p.add_argument("assignment", help="the assignment, e.g. a1_independent_ops")
    p.add_argument("--student", required=True, help="your student id, as your instructor gave it")
    p.add_argument("--notebook", help="the notebook (default: ASSIGNMENT.ipynb in this folder)")
    p.add_argument("--out", help="folder for the zip (default: the notebook's folder)")
    args = p.parse_args(argv)
    if os.environ.get("NBGRADER_EXECUTION"):
        # a `!python -m grader.handin` cell left in the notebook runs again when it is graded
        print("hand-in skipped while grading")
        return 0
    try:
        done = handin(args.assignment, args.student, args.notebook, args.out)
    except HandinError as e:
        print(f"not handed in: {e}", file=sys.stderr)
        return 2
    print(done.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
