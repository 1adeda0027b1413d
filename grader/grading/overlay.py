"""A private overlay over the public answer key: grading for credit.

The course folder ships every solution (``source/``) and every hidden check with its
reference computations (``hidden/``) in the public repository, for self-study and for the
project's own tests: pasting a reference into an answer would score full marks. An
instructor who grades for credit names a private folder in ``course.toml``::

    [overlay]
    folder = "/srv/course-private"     # holds source/<assignment>/ and hidden/<assignment>.py

whose ``source/<assignment>/`` folders and ``hidden/<name>.py`` modules replace the public
ones of the same name (variants with other constants, cases or tasks); what it does not hold
stays public. Every reader asks this module, so release, grading and the hub see the same
assignment:

* nbgrader (``generate_assignment``, ``autograde``, the formgrader of the hub, by hand)
  reads ``CourseDirectory.source_directory``, which ``nbgrader_config.py`` points at
  :func:`view`: a folder ``<course>/.source_view`` of one link per assignment, to the
  overlay's folder where it has one and to the public one otherwise;
* the judge loads hidden checks through :mod:`grader.grading.hidden`, which looks in the
  overlay's ``hidden/`` first (:func:`hidden_folders`);
* the pipeline's cache key (:mod:`grader.grading.run.inputs`) hashes what these return.

Never within a kernel's reach (:func:`problem`, checked whenever ``course.toml`` is
loaded): the folder is outside the course folder and outside everything the sandbox mounts
(``/usr``, ``/etc``, Python, the ``grader`` package, ``[sandbox] extra_ro``), closed to
group and others, and an overlay needs the sandbox (``mode = "none"`` is refused). The
judge imports the hidden checks before it gives up the grading user's rights.

An optional file ``secret`` in the folder seeds the cases a hidden check draws
(:func:`seed`, :func:`grader.grading.hidden.cases`): per course and assignment, not per
student, so identical notebooks get identical scores (exercises/GRADING.md, "Grading for
credit: a private overlay").
"""
from __future__ import annotations

import hashlib
import hmac
import os
import tomllib
from pathlib import Path

__all__ = ["VIEW", "SECRET", "folder_of", "folder", "problem", "assignments", "source",
           "hidden_folders", "view", "secret", "seed"]

VIEW = ".source_view"     # nbgrader's source_directory when there is an overlay
SECRET = "secret"         # <overlay>/secret: the per-course secret cases are drawn from
MIN_SECRET_BYTES = 16


def folder_of(raw: dict, path: Path) -> Path | None:
    """The overlay folder that ``course.toml`` (parsed: ``raw``, read from ``path``) names,
    or None; ValueError for a value that cannot be one."""
    section = raw.get("overlay", {})
    if not isinstance(section, dict):
        raise ValueError(f"{path}: [overlay] should be a table with folder = \"/a/path\"")
    unknown = sorted(set(section) - {"folder"})
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown} in [overlay]; known: ['folder']")
    value = section.get("folder", "")
    if not isinstance(value, str):
        raise ValueError(f"{path}: [overlay] folder = {value!r} should be a string: the path "
                         "of the private folder, or \"\" for none")
    if not value:
        return None
    if not os.path.isabs(value):
        raise ValueError(f"{path}: [overlay] folder = {value!r} should be an absolute path (a "
                         "relative one would point elsewhere in a copy of the course folder, "
                         "such as the hub's)")
    return Path(os.path.realpath(value))


def folder(course: str | Path) -> Path | None:
    """The overlay folder of the course at ``course`` (its ``course.toml``), or None; the
    file's other settings are checked by :func:`grader.grading.config.load`."""
    path = Path(course) / "course.toml"
    if not path.is_file():
        return None
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path} is not valid TOML: {e}") from None
    return folder_of(raw, path)


def _inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


def problem(cfg) -> str | None:
    """What is wrong with ``cfg.overlay`` (a :class:`~grader.grading.config.GradingConfig`),
    in words, or None."""
    from .sandbox.setup import _read_only_paths

    o = cfg.overlay
    if o is None:
        return None
    if not o.is_dir():
        return f"[overlay] folder = {str(o)!r} is not a folder (make it, with source/ and hidden/)"
    if not (o / "source").is_dir() and not (o / "hidden").is_dir():
        return (f"[overlay] folder {o} holds neither source/ nor hidden/: put the variants "
                "there as source/<assignment>/ and hidden/<assignment>.py")
    mode = o.stat().st_mode
    if mode & 0o077:
        return (f"[overlay] folder {o} can be read or entered by group or others (mode "
                f"{mode & 0o777:o}): run chmod 700 {o} (students' kernels on a hub run as other "
                "users)")
    course = Path(cfg.course).resolve()
    if _inside(o, course) or _inside(course, o):
        return (f"[overlay] folder {o} should be outside the course folder {course} (the "
                "course folder is the public repository's, and the hub copies it)")
    if cfg.sandbox.mode == "none":
        return ('[overlay] needs the sandbox: with [sandbox] mode = "none" a student\'s kernel '
                f"could read {o}")
    for mounted in ["/usr", "/etc", *_read_only_paths(tuple(cfg.sandbox.extra_ro))]:
        m = Path(os.path.realpath(mounted))
        if _inside(o, m) or _inside(m, o):
            return (f"[overlay] folder {o} is within a kernel's reach: the grading sandbox "
                    f"mounts {m}; keep the overlay elsewhere (e.g. /srv/course-private)")
    s = o / SECRET
    if s.exists() and (s.is_symlink() or not s.is_file() or s.stat().st_size < MIN_SECRET_BYTES):
        return (f"{s} should be a file of at least {MIN_SECRET_BYTES} random bytes (e.g. "
                f"head -c 32 /dev/urandom > {s}), or absent")
    return None


def assignments(course: str | Path) -> list[str]:
    """The assignments: folders with a notebook in ``source/`` or the overlay's ``source/``."""
    out: set[str] = set()
    for root in (Path(course), folder(course)):
        if root is not None and (root / "source").is_dir():
            out |= {p.name for p in (root / "source").iterdir()
                    if p.is_dir() and not p.name.startswith(".") and any(p.glob("*.ipynb"))}
    return sorted(out)


def source(course: str | Path, assignment: str) -> Path:
    """The folder ``assignment``'s source notebooks are read from: the overlay's where it
    has one, else the public one."""
    o = folder(course)
    if o is not None and (o / "source" / assignment).is_dir():
        return o / "source" / assignment
    return Path(course) / "source" / assignment


def hidden_folders(course: str | Path) -> list[Path]:
    """Where hidden checks are looked for, first first: the overlay's ``hidden/``, then the
    course's."""
    o = folder(course)
    first = [o / "hidden"] if o is not None and (o / "hidden").is_dir() else []
    return first + [Path(course).resolve() / "hidden"]


def view(course: str | Path) -> str:
    """nbgrader's ``CourseDirectory.source_directory`` for this course: ``"source"`` without
    an overlay; else :data:`VIEW`, refreshed now (one link per assignment to
    :func:`source`; links of assignments that are gone are removed). Safe to run from
    several processes at once: each link is replaced atomically."""
    course = Path(course).resolve()
    if folder(course) is None:
        return "source"
    links = course / VIEW
    links.mkdir(exist_ok=True)
    names = assignments(course)
    for name in names:
        target = str(source(course, name).resolve())
        link = links / name
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        tmp = links / f".{name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        os.symlink(target, tmp)
        os.replace(tmp, link)
    for entry in links.iterdir():      # (not another process's ".name.pid" being renamed)
        if entry.name not in names and not entry.name.startswith(".") and entry.is_symlink():
            entry.unlink(missing_ok=True)
    return VIEW


def secret(course: str | Path) -> bytes | None:
    """The per-course secret (``<overlay>/secret``), or None."""
    o = folder(course)
    s = o / SECRET if o is not None else None
    return s.read_bytes() if s is not None and s.is_file() and not s.is_symlink() else None


def seed(key: bytes | None, assignment: str, label: str = "") -> int:
    """A 64-bit seed for the cases ``label`` of ``assignment``: HMAC-SHA256 of the course's
    secret ``key``; without one, a public hash (an open course's cases are public anyway).
    The same for every student: identical notebooks get identical cases and scores."""
    msg = f"{assignment}\0{label}".encode()
    digest = (hmac.new(key, msg, hashlib.sha256).digest() if key
              else hashlib.sha256(b"public\0" + msg).digest())
    return int.from_bytes(digest[:8], "big")
