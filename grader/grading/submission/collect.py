"""The instructor's collect step for hand-ins from outside the hub: who handed in and when
come from the platform, never from the student's file.

    python -m grader.grading.submission.collect ASSIGNMENT [--course exercises] [--roster CSV]

A learning platform (Moodle, a shared drive, e-mail) says whose each upload is and when it
received it. The zip that :mod:`grader.handin` makes also names a student and a time, inside
it, but those are bytes the student wrote: trusted, they let a student hand in under another
student's id with a far-future time and replace that student's work (what nbgrader's
``zip_collect`` with a ``named_regexp`` did). So here:

- **whose**: the platform's. Each upload is in a folder named after its owner,
  ``downloaded/<assignment>/<student>/<any name>.zip`` (or ``.ipynb``), as a platform's
  per-student download gives it; or a roster (``--roster``, CSV with the columns ``file``,
  ``student`` and optionally ``received``) maps the platform's file names (paths below
  ``downloaded/<assignment>/``) to student ids (the roster wins over a folder's name: a
  platform may name folders by display name). An upload that neither says is refused.
- **when**: the platform's: the roster's ``received`` (ISO 8601 with its zone) or else the
  file's modification time as the platform's download left it.
- the id and the time inside a hand-in's zip are a *claim*: a zip that says it is another
  student's work, or another assignment's, is refused with a message naming both, and
  nothing is collected from it (the upload stays where it is; no submission changes). The
  time inside is never used (a note says when it is later than the platform's).
- **nothing is lost**: every hand-in collected is kept in
  ``handins/<assignment>/<student>/<received>-<sha256>.ipynb``;
  ``submitted/<student>/<assignment>/`` gets the newest by the platform's time, with that
  time in ``timestamp.txt``. A submission already there is replaced only by a newer one,
  and is moved to ``handins/<assignment>/<student>/replaced-<its time>/`` first. Only the
  owner's own ``submitted/<student>/`` is ever written.

It reads a hand-in within ``[submission]``'s limits (``course.toml``): a zip of at most
``max_total_mb`` with one notebook of at most ``max_notebook_mb`` that parses as a notebook
(:func:`.intake.parse_json`); and it exits 1 when anything was refused, so that a script
notices. ``make grade`` then reads ``submitted/`` through the intake like any submission.

nbgrader's ``zip_collect`` is switched off by the course's ``nbgrader_config.py``
(:class:`ZipCollectRefused`): it can attribute a hand-in only by the names in its files.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import os
import secrets
import stat
import sys
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ...handin import CLAIM
from ..config import SubmissionLimits
from .intake import TooComplex, id_problem, parse_json, shown

__all__ = ["collect", "Collected", "Upload", "main", "ZipCollectRefused"]

_MB = 2**20
_MAX_MEMBERS = 1000
_STAMP = "%Y%m%dT%H%M%SZ"


class Refused(Exception):
    """Why an upload is not collected, said so that the instructor knows what to do."""


@dataclass
class Upload:
    """One file the platform delivered: its owner and the time it was received, both the
    platform's."""
    path: Path
    owner: str
    received: datetime


@dataclass
class Collected:
    """What became of one upload: ``status`` is ``collected`` (now the submission),
    ``kept`` (kept in ``handins/``, an older or not newer one), or ``refused``."""
    path: Path
    owner: str | None
    status: str
    said: str

    def line(self, course: Path) -> str:
        try:
            where = self.path.relative_to(course)
        except ValueError:
            where = self.path
        who = f"{shown(self.owner)}: " if self.owner else ""
        return f"{self.status:9} {who}{where}: {self.said}"


def _utc(text: str) -> datetime:
    when = datetime.fromisoformat(text.strip())
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone (write it as 2026-12-02T00:15:00Z or "
                         "with +01:00)")
    return when.astimezone(timezone.utc)


def _shown_time(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _read_roster(roster: Path, base: Path) -> dict[Path, tuple[str, datetime | None]]:
    """``{upload path: (student id, received or None)}``; raises ValueError saying which row
    is wrong."""
    with open(roster, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
        columns = set(rows[0]) if rows else set()
    if rows and not {"file", "student"} <= columns or columns - {"file", "student", "received"}:
        raise ValueError(f"{roster}: the columns are file, student and (optional) received; "
                         f"it has {sorted(columns)}")
    out: dict[Path, tuple[str, datetime | None]] = {}
    for n, row in enumerate(rows, start=2):
        name = (row.get("file") or "").strip()
        path = (base / name).resolve()
        if not name or base.resolve() not in path.parents:
            raise ValueError(f"{roster}, line {n}: file {name!r} is not a file below {base}")
        if path in out:
            raise ValueError(f"{roster}, line {n}: {name!r} is listed twice")
        received = None
        if (row.get("received") or "").strip():
            try:
                received = _utc(row["received"])
            except ValueError as e:
                raise ValueError(f"{roster}, line {n}: received {e}") from None
        out[path] = ((row.get("student") or "").strip(), received)
    return out


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.lstat().st_mtime, timezone.utc)


def find(course: Path, assignment: str, roster: Path | None = None
         ) -> tuple[list[Upload], list[Collected]]:
    """The uploads of ``downloaded/<assignment>/`` with their owner and received time, and
    those whose owner cannot be told (refused)."""
    base = course / "downloaded" / assignment
    mapped = _read_roster(roster, base) if roster else {}
    uploads: list[Upload] = []
    refused: list[Collected] = []
    files = sorted(p for p in base.rglob("*") if p.suffix in (".zip", ".ipynb")
                   and not p.is_dir() and ".ipynb_checkpoints" not in p.parts) \
        if base.is_dir() else []
    for path in files:
        inner = path.relative_to(base).parts
        owner, received = mapped.get(path.resolve(), (None, None))
        how = "the roster"
        if owner is None and len(inner) == 2:
            owner, how = inner[0], "its folder"
        if owner is None:
            refused.append(Collected(path, None, "refused", (
                "whose is it? Put each student's uploads in downloaded/"
                f"{assignment}/<student id>/, or list the file in a roster (--roster)")))
            continue
        problem = id_problem("student", owner, SubmissionLimits().max_id_length)
        if problem:
            refused.append(Collected(path, None, "refused", (
                f"{problem} (from {how}): map the platform's name to the student's id "
                "in a roster (--roster)")))
            continue
        uploads.append(Upload(path, owner, received or _mtime(path)))
    for path in mapped:
        if path not in {p.resolve() for p in files}:
            refused.append(Collected(path, mapped[path][0], "refused",
                                     "listed in the roster, but there is no such .zip or "
                                     ".ipynb file"))
    return uploads, refused


def _notebook_names(course: Path, assignment: str) -> list[str]:
    return sorted(p.name for p in (course / "source" / assignment).glob("*.ipynb"))


def read(upload: Upload, assignment: str, names: list[str], limits: SubmissionLimits
         ) -> tuple[str, bytes, list[str]]:
    """(the notebook's released name, its bytes, notes) of ``upload``; raises
    :class:`Refused` saying why it cannot be collected."""
    fd = os.open(upload.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise Refused("not a regular file")
        cap = (limits.max_total_mb if upload.path.suffix == ".zip" else limits.max_notebook_mb) * _MB
        data = f.read(int(cap) + 1)
    if len(data) > cap:
        raise Refused(f"it is larger than {cap / _MB:g} MB ([submission] in course.toml)")
    notes: list[str] = []
    member = upload.path.name
    if upload.path.suffix == ".zip":
        member, data, claim = _from_zip(data, assignment, names, limits)
        if claim:
            if claim["assignment"] != assignment:
                raise Refused(f"it says inside that it hands in {shown(claim['assignment'])}, "
                              f"not {shown(assignment)}: collect it with that assignment")
            if claim["student"] != upload.owner:
                raise Refused(
                    f"it says inside that it is the work of student {shown(claim['student'])}, "
                    f"but the platform received it from {shown(upload.owner)}: not collected, "
                    f"and no submission of either student was changed. Ask "
                    f"{shown(upload.owner)} (a student hands in their own work under their "
                    f"own id: one who typed another id hands in again with their own); the "
                    f"upload stays where it is")
            said = datetime.strptime(claim["time"], _STAMP).replace(tzinfo=timezone.utc)
            if said > upload.received:
                notes.append(f"the zip's own time {_shown_time(said)} is later than the "
                             "platform received it: not used")
    try:
        nb = parse_json(data, limits.max_json_depth, limits.max_json_items)
    except (TooComplex, ValueError, UnicodeDecodeError) as e:
        raise Refused(f"{shown(member)} is not a notebook ({str(e)[:200]})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise Refused(f"{shown(member)} is not a Jupyter notebook")
    base = member.rsplit("/", 1)[-1]
    if len(names) == 1:
        name = names[0]
    elif base in names:
        name = base
    else:
        raise Refused(f"{shown(base)} is none of {assignment}'s notebooks ({', '.join(names)})")
    return name, data, notes


def _from_zip(data: bytes, assignment: str, names: list[str], limits: SubmissionLimits
              ) -> tuple[str, bytes, dict | None]:
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        infos = z.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise Refused(f"not a zip file ({e})") from None
    if len(infos) > _MAX_MEMBERS:
        raise Refused(f"the zip holds {len(infos)} files (a hand-in holds one notebook)")
    notebooks = [i for i in infos if not i.is_dir() and i.filename.endswith(".ipynb")
                 and not i.filename.startswith("__MACOSX/")
                 and ".ipynb_checkpoints/" not in i.filename
                 and not i.filename.rsplit("/", 1)[-1].startswith(".")]
    if len(notebooks) > 1:
        wanted = [i for i in notebooks if i.filename.rsplit("/", 1)[-1] in (names or [])]
        notebooks = wanted if len(wanted) == 1 else notebooks
    if len(notebooks) != 1:
        listed = ", ".join(shown(i.filename) for i in notebooks[:5]) or "none"
        raise Refused(f"the zip holds {len(notebooks)} notebooks ({listed}); a hand-in holds "
                      f"the one notebook of {assignment}")
    info = notebooks[0]
    cap = int(limits.max_notebook_mb * _MB)
    if info.file_size > cap:
        raise Refused(f"its notebook is {info.file_size / _MB:.1f} MB, more than "
                      f"max_notebook_mb = {limits.max_notebook_mb:g}")
    try:
        with z.open(info) as f:
            body = f.read(cap + 1)
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError, EOFError) as e:
        raise Refused(f"its notebook cannot be read from the zip ({e})") from None
    if len(body) > cap:
        raise Refused(f"its notebook is more than max_notebook_mb = {limits.max_notebook_mb:g}")
    m = CLAIM.match(info.filename)
    return info.filename, body, (m.groupdict() if m else None)


def _submitted_time(folder: Path) -> datetime | None:
    try:
        text = (folder / "timestamp.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    try:
        from nbgrader.utils import parse_utc

        return parse_utc(text.strip()).replace(tzinfo=timezone.utc)
    except Exception:  # noqa: BLE001 - any unreadable time counts as none
        return None


def _write_submission(course: Path, assignment: str, owner: str, name: str, data: bytes,
                      received: datetime, archive: Path) -> str:
    """Make ``submitted/<owner>/<assignment>/`` hold this notebook and its time; a folder
    there moves to ``archive/replaced-<time>/`` first. Never follows a link."""
    student = course / "submitted" / owner
    student.mkdir(parents=True, exist_ok=True)
    if student.is_symlink() or not student.is_dir():
        raise Refused(f"submitted/{owner} is not a folder (a link?): look at it, then collect again")
    target = student / assignment
    moved = ""
    if target.is_symlink() or target.exists():
        if target.is_symlink() or not target.is_dir():
            raise Refused(f"submitted/{owner}/{assignment} is not a folder (a link?): look at "
                          "it, then collect again")
        was = _submitted_time(target)
        stamp = was.strftime(_STAMP) if was else "untimed"
        keep = archive / f"replaced-{stamp}-{secrets.token_hex(3)}"
        archive.mkdir(parents=True, exist_ok=True)
        os.rename(target, keep)
        moved = f"; the submission that was there is in {keep.relative_to(course)}"
    staging = archive.parent / f".collect-{secrets.token_hex(6)}"
    staging.mkdir(parents=True)
    (staging / name).write_bytes(data)
    (staging / "timestamp.txt").write_text(
        received.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC"), encoding="utf-8")
    os.rename(staging, target)
    return moved


def collect(course: str | Path, assignment: str, roster: str | Path | None = None,
            limits: SubmissionLimits | None = None) -> list[Collected]:
    """Collect ``downloaded/<assignment>/`` into ``submitted/`` (see the module docstring);
    what became of each upload, in order."""
    course = Path(course).resolve()
    if limits is None:
        from ..config import load

        limits = load(course).submission
    names = _notebook_names(course, assignment)
    if not names:
        raise ValueError(f"no assignment {shown(assignment)}: {course}/source/{assignment}/ "
                         "holds no notebook")
    uploads, out = find(course, assignment, Path(roster) if roster else None)
    newest: dict[str, tuple[datetime, str, Upload, str, bytes]] = {}
    for up in sorted(uploads, key=lambda u: (u.received, str(u.path))):
        try:
            name, data, notes = read(up, assignment, names, limits)
        except Refused as e:
            out.append(Collected(up.path, up.owner, "refused", str(e)))
            continue
        except OSError as e:
            out.append(Collected(up.path, up.owner, "refused", f"cannot be read ({e})"))
            continue
        sha = hashlib.sha256(data).hexdigest()
        kept = course / "handins" / assignment / up.owner / f"{up.received.strftime(_STAMP)}-{sha[:16]}.ipynb"
        if not kept.exists():
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(data)
        said = "; ".join([f"received {_shown_time(up.received)}, kept as "
                          f"{kept.relative_to(course)}", *notes])
        out.append(Collected(up.path, up.owner, "kept", said))
        best = newest.get(up.owner)
        if best is None or (up.received, sha) > best[:2]:
            newest[up.owner] = (up.received, sha, up, name, data)
    for owner, (received, sha, up, name, data) in sorted(newest.items()):
        row = next(c for c in out if c.path == up.path)
        there = course / "submitted" / owner / assignment
        was = _submitted_time(there) if there.is_dir() and not there.is_symlink() else None
        if there.exists() or there.is_symlink():
            if was is None and not there.is_symlink():
                row.said += (f"; not the submission: submitted/{owner}/{assignment}/ has no "
                             "timestamp.txt (put there by hand?): move it away to collect")
                continue
            if was is not None and was >= received:
                same = (there / name).is_file() and hashlib.sha256(
                    (there / name).read_bytes()).hexdigest() == sha
                row.said += ("; already the submission" if same else
                             f"; not newer than the submission there (received "
                             f"{_shown_time(was)}), which stays")
                continue
        try:
            moved = _write_submission(course, assignment, owner, name, data, received,
                                      course / "handins" / assignment / owner)
        except Refused as e:
            row.status, row.said = "refused", str(e)
            continue
        row.status = "collected"
        row.said += f"; now submitted/{owner}/{assignment}/{name}{moved}"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m grader.grading.submission.collect",
        description="Collect hand-ins downloaded from a learning platform into submitted/: "
                    "the owner and time come from the platform (a folder per student, or a "
                    "roster), never from the student's zip. See exercises/GRADING.md, "
                    "'Hand-ins by zip'.")
    p.add_argument("assignment", help="the assignment, e.g. a1_independent_ops")
    p.add_argument("--course", default="exercises", help="nbgrader course directory")
    p.add_argument("--roster", help="CSV with the columns file (a path below "
                   "downloaded/ASSIGNMENT/), student and optionally received (ISO 8601 with "
                   "its zone): whose each upload is and when the platform received it")
    a = p.parse_args(argv)
    course = Path(a.course)
    try:
        rows = collect(course, a.assignment, a.roster)
    except (ValueError, OSError) as e:
        print(f"not collected: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"nothing to collect in {course.resolve() / 'downloaded' / a.assignment}/ "
              "(a folder per student holding their .zip or .ipynb)", file=sys.stderr)
        return 1
    for row in rows:
        print(row.line(course.resolve()))
    counts = {s: sum(r.status == s for r in rows) for s in ("collected", "kept", "refused")}
    print(f"{counts['collected']} collected, {counts['kept']} kept only in handins/, "
          f"{counts['refused']} refused")
    return 1 if counts["refused"] else 0


try:
    from nbgrader.plugins.zipcollect import FileNameCollectorPlugin
except ImportError:      # the command above needs no nbgrader
    FileNameCollectorPlugin = object      # type: ignore[misc,assignment]


class ZipCollectRefused(FileNameCollectorPlugin):   # type: ignore[misc,valid-type]
    """``nbgrader zip_collect``'s collector in this course: it stops, saying what to run.

    ``zip_collect`` reads the student id and the time from the names of the extracted files,
    which the student wrote: a zip claiming another student's id and a later time replaced
    that student's work. It cannot be told the platform's owner of an upload, so it is not
    used at all."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        message = ("nbgrader zip_collect is switched off in this course: it takes the student "
                   "id and the time from the names inside the student's zip, so one student "
                   "could replace another's work. Collect with "
                   "`python -m grader.grading.submission.collect ASSIGNMENT` (the owner and "
                   "time come from the platform; exercises/GRADING.md, 'Hand-ins by zip')")
        fail = getattr(self.parent, "fail", None)
        if fail:
            fail(message)          # nbgrader's: logs it and exits 1
        raise SystemExit(message)

    def collect(self, submitted_file: str):
        raise SystemExit("nbgrader zip_collect is switched off in this course")


if __name__ == "__main__":
    sys.exit(main())
