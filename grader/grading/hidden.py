"""Where a hidden test cell finds the instructor's hidden checks.

The checks that grade an assignment, and any reference answer they compare with, live in
the course folder, ``<course>/hidden/aN_<name>.py`` (``exercises/hidden`` in this
repository), never in the installed ``grader`` package: a student's kernel can import
``grader`` (the public checks and helpers a notebook uses), but the course folder is
neither on its import path nor mounted in the grading sandbox. A test cell imports them
inside its hidden block only, which the released notebook does not contain::

    public(checks.public_scatter(scatter, FRAMEWORK))
    ### BEGIN HIDDEN TESTS
    from grader.grading.hidden import load
    grade(load("a6_data_parallel").check_scatter(scatter, FRAMEWORK))
    ### END HIDDEN TESTS

:func:`load` finds the course folder, in this order:

1. the one :func:`use` registered: the judge (:class:`grader.grading.judge.executor.JudgedExecute`,
   nbgrader's process) registers nbgrader's ``CourseDirectory.root``, so ``make grade``,
   ``nbgrader autograde`` by hand and the formgrader's *Autograde* button all find it;
2. the nearest folder above the current one that holds ``nbgrader_config.py`` and
   ``hidden/``: ``nbgrader validate source/aN/aN.ipynb`` runs its kernel in
   ``source/aN``, a kernel grading test cells itself in ``autograded/<student>/aN``.

A course that grades for credit names a private overlay in ``course.toml``
(:mod:`grader.grading.overlay`): its ``hidden/<name>.py`` replaces the course's module of the
same name, and its ``secret`` seeds the cases a check draws with :func:`cases`.

This module holds no check and no answer; importing it from a student's kernel finds
nothing there (``load`` raises ``ImportError`` saying where the checks live).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["load", "use", "preload", "course_root", "cases", "PACKAGE"]

PACKAGE = "hidden"          # the folder's name in the course, and the package's
_registered: list[Path] = []
_preloaded: dict[str, ModuleType] = {}
_secret: dict[Path, bytes | None] = {}     # course folder -> its overlay's secret, once read


def use(root: str | Path) -> None:
    """Register ``root`` (a course folder) as the first place :func:`load` looks."""
    root = Path(root).resolve()
    if root in _registered:
        _registered.remove(root)
    _registered.insert(0, root)


def _is_course(folder: Path) -> bool:
    return (folder / "nbgrader_config.py").is_file() and (folder / PACKAGE / "__init__.py").is_file()


def course_root(start: str | Path | None = None) -> Path | None:
    """The course folder whose ``hidden/`` :func:`load` reads, or ``None``."""
    for root in _registered:
        if (root / PACKAGE / "__init__.py").is_file():
            return root
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if _is_course(folder):
            return folder
    return None


def preload(root: str | Path) -> None:
    """Import every module of ``<root>/hidden`` now and register ``root``: the judge does
    this before it gives up the grading user's rights (:mod:`grader.grading.judge.confine`),
    after which :func:`load` answers from what was imported and reads no file."""
    from .overlay import hidden_folders, secret

    use(root)
    root = Path(root).resolve()
    _secret[root] = secret(root)
    for stem in sorted({p.stem for f in hidden_folders(root) for p in f.glob("a*.py")}):
        if stem.isidentifier():
            _preloaded[stem] = load(stem)


def load(assignment: str) -> ModuleType:
    """The hidden checks of ``assignment`` (``"a6_data_parallel"``): the module
    ``<course>/hidden/<assignment>.py``, imported as ``hidden.<assignment>``."""
    if assignment in _preloaded:
        return _preloaded[assignment]
    root = course_root()
    if root is None:
        raise ImportError(f"the hidden checks of {assignment} are not here: they live in the "
                          f"instructor's course folder ({PACKAGE}/{assignment}.py next to "
                          "nbgrader_config.py), which grading reads and students never see")
    from .overlay import hidden_folders

    folders = hidden_folders(root)            # the private overlay's first
    package = _package(folders)
    name = f"{PACKAGE}.{assignment}"
    module = sys.modules.get(name)
    if module is None:
        path = next((f / f"{assignment}.py" for f in folders if (f / f"{assignment}.py").is_file()),
                    root / PACKAGE / f"{assignment}.py")
        if not path.is_file():
            raise ImportError(f"no hidden checks for {assignment}: {path} does not exist")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        setattr(package, assignment, module)
    return module


def cases(assignment: str, label: str = "") -> "random.Random":
    """A random generator for the cases ``label`` of ``assignment``'s hidden checks, seeded
    from the course's secret (the overlay's ``secret`` file; without one, a public seed):
    the same cases for every student and every grading run, none a student can know
    beforehand. Read before the judge gives up its rights (:func:`preload`)."""
    import random

    from .overlay import secret, seed

    # the course preload read (a confined judge can no longer look into the course folder)
    root = next((r for r in _registered if r in _secret), None) or course_root()
    if root is not None and root not in _secret:
        _secret[root] = secret(root)
    return random.Random(seed(_secret.get(root) if root is not None else None, assignment, label))


def _package(folders: list[Path]) -> ModuleType:
    """The ``hidden`` package of ``folders`` (the overlay's, then the course's ``hidden/``;
    its ``__init__`` is the course's); one of another course folder is dropped first (with
    its modules), so two courses graded one after the other never mix their checks."""
    folder = folders[-1]
    package = sys.modules.get(PACKAGE)
    if package is not None and [str(f) for f in folders] != list(getattr(package, "__path__", [])):
        for key in [k for k in sys.modules if k == PACKAGE or k.startswith(PACKAGE + ".")]:
            del sys.modules[key]
        package = None
    if package is None:
        spec = importlib.util.spec_from_file_location(
            PACKAGE, folder / "__init__.py", submodule_search_locations=[str(f) for f in folders])
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = package
        spec.loader.exec_module(package)
    importlib.invalidate_caches()
    return package
