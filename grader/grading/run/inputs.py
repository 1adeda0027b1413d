"""Every input of a verdict besides the submission, hashed: the cache key of the ledger.

A stored verdict is reused only while everything that made it is the same (DESIGN.md: "A
cached verdict is keyed by every input that made it"). For one assignment these are:

* ``source``: the files of its source folder (the overlay's where it has one), which give
  the test cells, their points and the files copied beside the notebook;
* ``hidden``: its hidden checks, ``hidden/<assignment>.py`` (the overlay's first), the
  ``hidden/__init__.py`` files and every hidden module that is not another assignment's
  (a helper it may import);
* ``grader``: the ``grader`` package's source (checks, simulator, judge, sandbox) and the
  name and version of every distribution installed in this Python (nbgrader, numpy, torch,
  paddle...);
* ``limits``: ``[limits]``, ``[submission]`` and the sandbox's mode and extra paths, after
  the command line's overrides;
* ``secret``: a hash of the overlay's secret, which draws the hidden checks' cases;
* ``config``: the course's ``nbgrader_config.py`` (nbgrader's preprocessors and options).

The ledger stores these digests with each job (:meth:`~.ledger.Ledger.sync`); a job whose
inputs changed is graded again, and :func:`changed` says which, in words.
"""
from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import asdict
from pathlib import Path

from .. import overlay
from ..config import GradingConfig

__all__ = ["verdict_inputs", "grader_digest", "key", "dumps", "changed", "describe", "WORDS"]

WORDS = {"source": "the source notebooks", "hidden": "the hidden checks",
         "grader": "the grader package or its installed dependencies",
         "limits": "the limits (course.toml or the command line)",
         "secret": "the overlay's secret",
         "config": "the course's nbgrader_config.py"}


def _files(h, files: list[tuple[str, Path]]) -> None:
    for name, path in files:
        data = path.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)


def grader_digest() -> str:
    """The ``grader`` package's Python files and this environment's distributions (about
    0.3 s: a grading run takes it once, when it starts, and passes it to
    :func:`verdict_inputs`; its workers are new processes, which import the code as it is
    then)."""
    import importlib.metadata

    import grader

    root = Path(grader.__file__).resolve().parent
    h = hashlib.sha256()
    _files(h, [(str(p.relative_to(root)), p) for p in sorted(root.rglob("*.py"))
               if "__pycache__" not in p.parts])
    # the environment's own packages, not whatever sys.path holds: run from the repository's
    # folder, its pdl_course.egg-info is one more "distribution" than run from elsewhere,
    # and every verdict was out of date when make grade and a worker differed in their cwd
    site = sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})
    for d in sorted({f"{d.metadata['Name']}=={d.version}"
                     for d in importlib.metadata.distributions(path=site)}):
        h.update(d.encode() + b"\n")
    return h.hexdigest()


def _source(course: Path, assignment: str) -> str:
    folder = overlay.source(course, assignment)
    h = hashlib.sha256()
    _files(h, [(str(p.relative_to(folder)), p) for p in sorted(folder.rglob("*"))
               if p.is_file() and "__pycache__" not in p.parts])
    return h.hexdigest()


def _hidden(course: Path, assignment: str, others: set[str]) -> str:
    chosen: dict[str, Path] = {}
    inits = []
    for folder in overlay.hidden_folders(course):        # the overlay's first
        if (folder / "__init__.py").is_file():
            inits.append((f"{folder.name}/__init__.py", folder / "__init__.py"))
        for p in sorted(folder.glob("*.py")):
            if p.stem != "__init__" and (p.stem == assignment or p.stem not in others):
                chosen.setdefault(p.name, p)
    h = hashlib.sha256()
    _files(h, inits + sorted(chosen.items()))
    return h.hexdigest()


def verdict_inputs(cfg: GradingConfig, assignment: str, grader: str | None = None) -> dict[str, str]:
    """The digests of ``assignment``'s verdict inputs under ``cfg`` (see the module
    docstring); ``grader``: :func:`grader_digest`, when the caller has taken it already."""
    course = cfg.course
    limits = {"limits": asdict(cfg.limits), "submission": asdict(cfg.submission),
              "sandbox": [cfg.sandbox.mode, list(cfg.sandbox.extra_ro)]}
    key_ = overlay.secret(course)
    return {
        "source": _source(course, assignment),
        "hidden": _hidden(course, assignment, set(overlay.assignments(course))),
        "grader": grader or grader_digest(),
        "limits": hashlib.sha256(json.dumps(limits, sort_keys=True).encode()).hexdigest(),
        "secret": hashlib.sha256(b"secret\0" + key_).hexdigest() if key_ else "",
        "config": _config(course),
    }


def _config(course: Path) -> str:
    path = Path(course) / "nbgrader_config.py"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def dumps(inputs: dict[str, str]) -> str:
    return json.dumps(inputs, sort_keys=True)


def key(submission: str, inputs: dict[str, str]) -> str:
    """The ledger's digest of one job: the submission's and every other input's."""
    return hashlib.sha256(f"{submission}\0{dumps(inputs)}".encode()).hexdigest()


def changed(before: str | None, now: str) -> list[str]:
    """What differs between two stored inputs (:func:`dumps`), in words; a verdict stored
    before inputs were recorded (``None``) names every input."""
    try:
        old = json.loads(before) if before else {}
    except ValueError:
        old = {}
    new = json.loads(now)
    return [WORDS.get(k, k) for k in sorted(new) if old.get(k) != new[k]]


def describe(before: str | None, now: str) -> str:
    """Why a verdict stored with inputs ``before`` is out of date, in words."""
    if not before:
        return "made before the ledger recorded its inputs"
    what = changed(before, now)
    return (" and ".join(what) if len(what) < 3 else ", ".join(what[:-1]) + " and " + what[-1]) \
        + (" changed" if what else " are the same")
