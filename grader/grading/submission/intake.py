"""A submission is data: what is read of a student's folder, and how, before anything runs.

Everything under ``submitted/<student>/<assignment>/`` was made by the student. The grader
(root) reads it here and nowhere else:

- only **regular files with one name** are read; a symbolic link, a hard link (a file with
  more than one name can be another student's notebook or the gradebook), a named pipe, a
  socket or a device is refused with the reason, never opened (``O_NOFOLLOW | O_NONBLOCK``,
  and the opened file is checked again with ``fstat``), so nothing blocks and no link is
  followed;
- **limits** (``[submission]`` in ``course.toml``): files per assignment, bytes per file,
  per notebook and in all, and a notebook's JSON nesting and number of values, checked on the
  bytes before the JSON is parsed (:func:`parse_json`), so a notebook made of millions of
  ``{}`` is refused in a fraction of a second instead of being parsed into gigabytes;
- the folders themselves (``<student>``, ``<assignment>``) must not be links either, and the
  ids must be names the grader can use for files (:func:`id_problem`).

What is accepted is staged (:meth:`Submission.stage`) into a private folder that nbgrader
reads in place of ``submitted/``: nbgrader, the sandboxed kernel and the feedback only ever
see copies of files the student submitted. Notebooks are staged with the assignment's own
nbgrader metadata put back where the student's was edited (:func:`restore_metadata`).
Whatever is refused is listed, with the reason, in the outcome and the feedback; the rest is
graded. CSV fields that a spreadsheet would run as a formula are neutralised by
:func:`csv_safe`.
"""
from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..config import SubmissionLimits

__all__ = ["Submission", "Refused", "read", "check", "parse_json", "TooComplex", "id_problem",
           "shown", "restore_metadata", "csv_safe"]

# nbgrader's CourseDirectory.ignore: never copied by nbgrader, so not read here either
IGNORED_NAMES = (".ipynb_checkpoints", "__pycache__", "feedback")
IGNORED_SUFFIXES = (".pyc",)
MAX_FOLDER_DEPTH = 8
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*\Z")
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MB = 2**20


def shown(name: str, width: int = 48) -> str:
    """``name`` as it may be printed in a report: ASCII, quoted, cut to ``width``."""
    text = ascii(name)
    return text if len(text) <= width else text[:width - 4] + "...'"


def id_problem(kind: str, name: str, max_length: int = 64) -> str | None:
    """Why ``name`` cannot be a ``kind`` id (``"student"``, ``"assignment"``), or None.

    An id names files (logs, ``autograded/<student>/``) and ends up in spreadsheets: 1 to
    ``max_length`` characters, letters, digits and ``. _ @ + -``, starting with a letter or
    digit (so never a formula, a hidden file or ``..``)."""
    if not name:
        return f"the {kind} id is empty"
    if len(name) > max_length:
        return f"the {kind} id {shown(name)} is longer than {max_length} characters"
    if not _ID.match(name):
        return (f"the {kind} id {shown(name)} is not letters, digits and . _ @ + - starting "
                "with a letter or digit")
    return None


def csv_safe(value: object) -> str:
    """A CSV field a spreadsheet shows as text: one starting with ``= + - @`` (or a tab or
    carriage return) that is not a plain number gets a leading ``'``."""
    text = str(value)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        try:
            float(text)
            return text
        except ValueError:
            return "'" + text
    return text


@dataclass(frozen=True)
class Refused:
    path: str       # relative to the assignment folder
    reason: str

    def __str__(self) -> str:
        return f"{shown(self.path)} {self.reason}"


class TooComplex(ValueError):
    """A notebook's JSON is over a limit of ``[submission]`` (not read further)."""


_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_SIGN = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def parse_json(data: bytes, max_depth: int, max_items: int):
    """``json.loads(data)``, after checking on the bytes that it holds at most ``max_items``
    values and nests at most ``max_depth`` levels (raises :class:`TooComplex`).

    The checks run at C speed on copies of ``data``: escaped backslashes and quotes are
    removed, then every string; what is left is counted (``,`` ``{`` ``[``), and the running
    sum of its brackets (+1 opens, -1 closes) is the depth. ``ValueError``
    (``json.JSONDecodeError``) for what is not JSON."""
    flat = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    if flat.count(b'"') % 2:
        raise json.JSONDecodeError("a string is not closed", "", len(data))
    skeleton = _STRING.sub(b"", flat)
    del flat
    items = skeleton.count(b",") + skeleton.count(b"{") + skeleton.count(b"[") + 1
    if items > max_items:
        raise TooComplex(f"it holds about {items:,} JSON values (the limit is {max_items:,})")
    signs = skeleton.translate(_SIGN, _NOT_BRACKET)   # [ { -> +1, ] } -> -1, nothing else
    del skeleton
    if signs:
        import numpy as np

        depth = int(np.cumsum(np.frombuffer(signs, dtype=np.int8), dtype=np.int32).max())
        if depth > max_depth:
            raise TooComplex(f"its JSON nests {depth} levels deep (the limit is {max_depth})")
    return json.loads(data)


@dataclass
class Submission:
    """What was read of ``submitted/<student>/<assignment>``: the accepted files (bytes, by
    relative path) and what was refused, with the reason."""
    student: str
    assignment: str
    exists: bool = True
    problem: str = ""                   # why the folder itself was not read
    files: dict[str, bytes] = field(default_factory=dict)
    refused: list[Refused] = field(default_factory=list)

    def digest(self) -> str:
        """One digest of the accepted files (names and contents) and of what was refused;
        '' when there is no submission."""
        if not self.exists:
            return ""
        h = hashlib.sha256(self.problem.encode())
        for name in sorted(self.files):
            h.update(name.encode("utf-8", "surrogateescape") + b"\0"
                     + str(len(self.files[name])).encode() + b"\0" + self.files[name])
        for r in self.refused:
            h.update(f"\0refused {r.path}\0{r.reason}".encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    def notes(self, but: str = "") -> list[str]:
        """What was refused, one line per reason (entries with the same reason together),
        for the outcome and the feedback; ``but``: an entry reported elsewhere."""
        by_reason: dict[str, list[str]] = {}
        for r in self.refused:
            if r.path != but:
                by_reason.setdefault(r.reason, []).append(shown(r.path))
        lines = []
        for reason, names in by_reason.items():
            if len(names) == 1:
                lines.append(f"not read: {names[0]} {reason}")
            else:
                more = f" and {len(names) - 3} more" if len(names) > 3 else ""
                why = reason[3:] if reason.startswith("is ") else reason
                lines.append(f"not read ({len(names)} entries): {', '.join(names[:3])}{more}: {why}")
        return lines

    def stage(self, root: Path, notebooks: dict[str, bytes] | None = None) -> Path:
        """Write the accepted files (``notebooks``: these bytes in place of the submitted
        ones) under ``root/<student>/<assignment>`` and return that folder."""
        folder = Path(root) / self.student / self.assignment
        folder.mkdir(parents=True, exist_ok=True)
        for rel, data in self.files.items():
            dest = folder / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes((notebooks or {}).get(rel, data))
        return folder


def read(course: Path, student: str, assignment: str, limits: SubmissionLimits) -> Submission:
    """Read ``course/submitted/<student>/<assignment>`` as data (see the module docstring).
    Never follows a link, never blocks, reads at most the limits."""
    sub = Submission(student, assignment)
    for kind, name in (("student", student), ("assignment", assignment)):
        bad = id_problem(kind, name, limits.max_id_length)
        if bad:
            sub.problem = bad
            return sub
    try:
        top = os.open(Path(course) / "submitted", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        sub.exists = False
        return sub
    fds = [top]
    try:
        for rel in (student, assignment):
            try:
                fds.append(os.open(rel, _DIR, dir_fd=fds[-1]))
            except FileNotFoundError:
                sub.exists = False
                return sub
            except OSError as e:
                where = "/".join(["submitted", student, assignment][:len(fds) + 1])
                what = ("a symbolic link" if e.errno in (errno.ELOOP, errno.ENOTDIR)
                        and _is_link(rel, fds[-1]) else "not a folder")
                sub.problem = f"{where} is {what}: it was not read"
                return sub
        _Walk(sub, limits).folder(fds[-1], "", 0)
    finally:
        for fd in fds:
            os.close(fd)
    return sub


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


class _Walk:
    def __init__(self, sub: Submission, limits: SubmissionLimits) -> None:
        self.sub, self.lim = sub, limits
        self.total = 0
        self.seen = 0   # entries looked at, in all (bounded, whatever the folder holds)

    def refuse(self, path: str, reason: str) -> None:
        self.sub.refused.append(Refused(path, reason))

    def folder(self, fd: int, prefix: str, depth: int) -> None:
        cap = self.lim.max_files + 50
        names: list[str] = []
        with os.scandir(fd) as it:
            for entry in it:
                if self.seen >= cap:
                    self.refuse(prefix or ".", f"holds more than {cap} entries: the rest was "
                                "not read")
                    break
                self.seen += 1
                names.append(entry.name)
        # notebooks first: other files must not take the notebook's place under the limits
        for name in sorted(names, key=lambda n: (not n.endswith(".ipynb"), n)):
            self.entry(fd, prefix, name, depth)

    def entry(self, fd: int, prefix: str, name: str, depth: int) -> None:
        rel = prefix + name
        if name in IGNORED_NAMES or name.endswith(IGNORED_SUFFIXES):
            return
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            self.refuse(rel, "has a name that is not UTF-8 text")
            return
        if any(ord(c) < 32 or ord(c) == 127 for c in name):
            self.refuse(rel, "has a control character in its name")
            return
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as e:
            self.refuse(rel, f"could not be looked at ({e.strerror})")
            return
        if stat.S_ISLNK(st.st_mode):
            try:
                target = shown(os.readlink(name, dir_fd=fd), 40)
            except OSError:
                target = "?"
            self.refuse(rel, f"is a symbolic link (to {target}): links are not followed")
        elif stat.S_ISDIR(st.st_mode):
            if depth + 1 >= MAX_FOLDER_DEPTH:
                self.refuse(rel, f"is nested more than {MAX_FOLDER_DEPTH} folders deep")
                return
            try:
                sub_fd = os.open(name, _DIR, dir_fd=fd)
            except OSError as e:
                self.refuse(rel, f"could not be opened ({e.strerror})")
                return
            try:
                self.folder(sub_fd, rel + "/", depth + 1)
            finally:
                os.close(sub_fd)
        elif not stat.S_ISREG(st.st_mode):
            self.refuse(rel, f"is {_kind(st.st_mode)}: only regular files are read")
        else:
            self.file(fd, rel, name, st)

    def file(self, fd: int, rel: str, name: str, st: os.stat_result) -> None:
        lim = self.lim
        limit_mb = lim.max_notebook_mb if name.endswith(".ipynb") else lim.max_file_mb
        most = int(limit_mb * _MB)
        if st.st_nlink > 1:
            self.refuse(rel, f"is a hard link (the file has {st.st_nlink} names): only files "
                        "that belong to the submission alone are read")
            return
        if st.st_size > most:
            self.refuse(rel, f"is {st.st_size / _MB:.3g} MB, over the limit of {limit_mb:g} MB "
                        "for one " + ("notebook" if name.endswith(".ipynb") else "file"))
            return
        if len(self.sub.files) >= lim.max_files:
            self.refuse(rel, f"is over the limit of {lim.max_files} files per assignment")
            return
        if self.total + st.st_size > lim.max_total_mb * _MB:
            self.refuse(rel, f"would take the submission over {lim.max_total_mb:g} MB in all")
            return
        try:
            f = os.open(name, _OPEN, dir_fd=fd)
        except OSError as e:
            self.refuse(rel, f"could not be opened ({e.strerror})")
            return
        try:
            now = os.fstat(f)
            if (not stat.S_ISREG(now.st_mode) or now.st_nlink > 1
                    or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino)):
                self.refuse(rel, "changed while it was read: not read")
                return
            chunks, left = [], most + 1
            while left > 0:
                chunk = os.read(f, min(left, _MB))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
        finally:
            os.close(f)
        if len(data) > most or self.total + len(data) > lim.max_total_mb * _MB:
            self.refuse(rel, "grew while it was read, over the limit: not read")
            return
        self.total += len(data)
        self.sub.files[rel] = data


def restore_metadata(nb, released) -> list[str]:
    """Put the assignment's nbgrader metadata (from the released notebook) back on the cells
    of ``nb`` (in place): a cell whose metadata names a grade id the assignment does not
    have, names one a second time or is not a dict loses it (it becomes an ordinary cell;
    nbgrader adds a deleted test cell back); a cell whose metadata was edited gets the
    assignment's. Returns what was changed, one line per cell."""
    want = {}
    for c in released.cells:
        meta = c.get("metadata", {}).get("nbgrader")
        if isinstance(meta, dict) and isinstance(meta.get("grade_id"), str):
            want.setdefault(meta["grade_id"], meta)
    notes, seen = [], set()
    for i, cell in enumerate(nb.cells):
        if "nbgrader" not in cell.metadata:
            continue
        meta = cell.metadata["nbgrader"]
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        why = ("is not a dict" if not isinstance(meta, dict) else
               "has no grade id" if not isinstance(gid, str) else
               f"names grade id {shown(gid, 40)}, which the assignment does not have"
               if gid not in want else f"repeats grade id {shown(gid, 40)}" if gid in seen else "")
        if why:
            del cell.metadata["nbgrader"]
            notes.append(f"cell {i + 1}: its nbgrader metadata {why}; it was graded as an "
                         "ordinary cell")
            continue
        seen.add(gid)
        if meta != want[gid]:
            edited = sorted(k for k in set(meta) | set(want[gid])
                            if k != "checksum" and meta.get(k) != want[gid].get(k))
            cell.metadata["nbgrader"] = copy.deepcopy(want[gid])
            if edited:
                notes.append(f"cell {i + 1} ({gid}): its nbgrader metadata was edited "
                             f"({', '.join(shown(k, 24) for k in edited[:5])}); the "
                             "assignment's was put back")
    return notes


def _graded_ids(nb) -> list[str]:
    """Grade ids of the answer and test cells of ``nb``, in order."""
    out = []
    for c in nb.cells:
        meta = c.get("metadata", {}).get("nbgrader")
        if isinstance(meta, dict) and (meta.get("solution") or meta.get("grade")) \
                and isinstance(meta.get("grade_id"), str):
            out.append(meta["grade_id"])
    return out


def _ids_in(path: Path) -> set[str]:
    """The answer and test cells' grade ids of one of the course's own notebooks."""
    import nbformat

    try:
        return set(_graded_ids(nbformat.read(path, as_version=4)))
    except Exception:  # noqa: BLE001 - an unreadable course notebook names no assignment
        return set()


def other_assignment(nb, course: Path, assignment: str, name: str) -> str | None:
    """The assignment whose notebook ``nb`` is, when it holds none of ``assignment``'s answer
    and test cells and all of its own are another assignment's (the course's ``release/``,
    else ``source/``)."""
    have = set(_graded_ids(nb))
    if not have:
        return None
    course = Path(course)
    ours = _ids_in(course / "release" / assignment / name) or \
        _ids_in(course / "source" / assignment / name)
    if have & ours:
        return None
    for kind in ("release", "source"):
        for path in sorted(course.glob(f"{kind}/*/*.ipynb")):
            if path.parent.name != assignment and have <= _ids_in(path):
                return path.parent.name
    return None


def restore_missing(nb, released) -> list[str]:
    """Put back, as released, the test cells a student deleted (in place), each after the
    nearest released cell before it that the notebook still has, so that the rest is graded;
    name the answer cells that are missing too. nbgrader would add a deleted test cell back
    itself, but it looks for the very cell before it and raises ``KeyError`` when that one
    (the task's answer cell) was deleted too."""
    def gid(c):
        meta = c.get("metadata", {}).get("nbgrader")
        return meta.get("grade_id") if isinstance(meta, dict) else None

    present = {gid(c) for c in nb.cells} - {None}
    notes, at = [], 0                  # at: where the next put-back cell goes in nb
    for cell in released.cells:
        g = gid(cell)
        if g is None:
            continue
        if g in present:
            at = next(i for i, c in enumerate(nb.cells) if gid(c) == g) + 1
            continue
        meta = cell.metadata["nbgrader"]
        if meta.get("solution"):
            notes.append(f"answer cell {g} is missing (deleted, or its nbgrader metadata was "
                         "removed): its test ran with what the rest of the notebook defines")
        elif meta.get("grade"):
            from nbformat.corpus.words import generate_corpus_id

            put = copy.deepcopy(cell)
            if "id" in put:
                put["id"] = generate_corpus_id()     # cell ids are unique in a notebook
            nb.cells.insert(at, put)
            at += 1
            notes.append(f"test cell {g} was deleted; the original was put back and run")
    return notes


def check(sub: Submission, course: Path, limits: SubmissionLimits
          ) -> tuple[tuple[str, str] | None, dict[str, bytes], list[str]]:
    """The assignment's notebooks in ``sub``: ``(problem, staged, notes)``.

    ``problem`` is ``(status, reason)`` when the submission cannot be graded at all (missing,
    a notebook refused, not JSON or not a notebook); ``staged`` the bytes nbgrader reads for
    each notebook (the assignment's metadata put back, :func:`restore_metadata`); ``notes``
    what was refused or changed, for the outcome and the feedback."""
    import nbformat

    folder = f"submitted/{sub.student}/{sub.assignment}"
    if sub.problem:
        return ("invalid", sub.problem), {}, []
    if not sub.exists:
        return ("missing", f"no submission: {folder} does not exist"), {}, []
    staged: dict[str, bytes] = {}
    notes = sub.notes()
    for src in sorted((Path(course) / "source" / sub.assignment).glob("*.ipynb")):
        name = src.name
        if name not in sub.files:
            refused = next((r for r in sub.refused if r.path == name), None)
            if refused is not None:
                return (("invalid", f"{name} {refused.reason}, so it was not graded"), {},
                        sub.notes(but=name))
            return ("missing", f"notebook {name} is missing from the submission"), {}, notes
        data = sub.files[name]
        try:
            parse_json(data, limits.max_json_depth, limits.max_json_items)
        except TooComplex as e:
            return ("invalid", f"{name} was not read: {e}"), {}, notes
        except (ValueError, UnicodeDecodeError) as e:
            where = f" at line {e.lineno}" if isinstance(e, json.JSONDecodeError) and e.doc else ""
            return ("invalid", f"{name} is not valid JSON ({getattr(e, 'msg', e)}{where}); was "
                    "it saved completely?"), {}, notes
        try:
            nb = nbformat.reads(data.decode("utf-8"), as_version=4)
            nbformat.validate(nb)
        except Exception as e:  # noqa: BLE001 - nbformat raises several kinds
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return ("invalid", f"{name} is not a valid notebook ({first[:200]})"), {}, notes
        other = other_assignment(nb, course, sub.assignment, name)
        if other is not None:
            return ("invalid", f"{name} is the notebook of assignment {other}, not of "
                    f"{sub.assignment} (its answer and test cells are {other}'s): submit "
                    f"{sub.assignment}'s notebook under this name"), {}, notes
        released = Path(course) / "release" / sub.assignment / name
        if released.is_file():
            rel = nbformat.read(released, as_version=4)
            notes += restore_metadata(nb, rel)
            notes += restore_missing(nb, rel)
        staged[name] = nbformat.writes(nb).encode("utf-8")
    return None, staged, notes
