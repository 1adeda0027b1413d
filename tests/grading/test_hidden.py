"""Hidden checks and reference answers live in the course folder (``exercises/hidden``), out of
everything a student's kernel can import; hidden test blocks find them (grader/grading/hidden.py)."""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

import grader
from grader.grading import hidden

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"
HIDDEN = EXERCISES / "hidden"
ASSIGNMENTS = sorted(p.name for p in (EXERCISES / "source").iterdir() if p.is_dir())


@pytest.fixture
def fresh(monkeypatch):
    """No registered course and no ``hidden`` package loaded; both restored afterwards."""
    monkeypatch.setattr(hidden, "_registered", [])
    saved = {k: v for k, v in sys.modules.items() if k == "hidden" or k.startswith("hidden.")}
    for k in saved:
        del sys.modules[k]
    yield
    for k in [k for k in sys.modules if k == "hidden" or k.startswith("hidden.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def _course(folder: Path, marker: str) -> Path:
    (folder / "hidden").mkdir(parents=True)
    (folder / "nbgrader_config.py").write_text("c = get_config()\n")
    (folder / "hidden" / "__init__.py").write_text("")
    (folder / "hidden" / "a9_test.py").write_text(f"MARKER = {marker!r}\n")
    (folder / "source" / "a9_test").mkdir(parents=True)
    return folder


def test_load_reads_the_registered_course_first_then_the_one_above_the_current_folder(
        tmp_path, monkeypatch, fresh):
    one, two = _course(tmp_path / "one", "one"), _course(tmp_path / "two", "two")
    monkeypatch.chdir(two / "source" / "a9_test")          # where nbgrader validate's kernel runs
    assert hidden.load("a9_test").MARKER == "two"
    hidden.use(one)                                          # what the judge does
    assert hidden.course_root() == one.resolve()
    assert hidden.load("a9_test").MARKER == "one"            # the other course's modules dropped
    assert sys.modules["hidden"].__path__ == [str((one / "hidden").resolve())]


def test_load_says_where_the_checks_live_when_the_course_folder_is_not_there(tmp_path, monkeypatch,
                                                                             fresh):
    monkeypatch.chdir(tmp_path)                              # a student's folder: no course above
    with pytest.raises(ImportError, match="instructor's course folder"):
        hidden.load("a6_data_parallel")
    hidden.use(EXERCISES)
    with pytest.raises(ImportError, match="no hidden checks for a9_nothing"):
        hidden.load("a9_nothing")


def test_every_assignment_has_its_hidden_module_and_its_test_cells_load_it_only_in_hidden_blocks():
    for a in ASSIGNMENTS:
        assert (HIDDEN / f"{a}.py").is_file(), a
        nb = nbformat.read(EXERCISES / "source" / a / f"{a}.ipynb", as_version=4)
        tests = [c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert tests, a
        for src in tests:
            head, _, rest = src.partition("### BEGIN HIDDEN TESTS")
            block, _, tail = rest.partition("### END HIDDEN TESTS")
            assert f'load("{a}")' in block, (a, src)
            assert "hidden" not in head + tail and "load(" not in head + tail, (a, src)
        for c in nb.cells:
            if not c.metadata.get("nbgrader", {}).get("grade"):
                assert "grader.grading.hidden" not in c.source and "check_" not in c.source, (a, c.source)


def _student_importable_modules() -> list:
    """Every module of the ``grader`` package: what a kernel in the sandbox can import."""
    out = []
    for info in pkgutil.walk_packages(grader.__path__, "grader."):
        if info.name.endswith("__main__"):
            continue
        out.append(importlib.import_module(info.name))
    return out


def _hidden_definitions() -> dict[str, set[str]]:
    """Names each hidden module defines itself (functions, classes, data), by its source."""
    out = {}
    for a in ASSIGNMENTS:
        tree = ast.parse((HIDDEN / f"{a}.py").read_text())
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        out[a] = names - {"__all__"}
    return out


def _code_of(fn) -> str | None:
    """The function's body as a syntax tree (its name and docstring left out), ``None`` for
    a short one (a one-line helper can be anybody's)."""
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None     # a lambda made by a factory: its source is the factory's line
    body = node.body[1:] if ast.get_docstring(node) else node.body
    text = ast.dump(ast.Module(body=body, type_ignores=[]))
    return text if len(text) > 600 else None


def test_nothing_a_student_kernel_can_import_holds_a_hidden_check_or_a_reference_answer():
    """By name (a check, a reference, a case table) and by code (a copy under another name)."""
    from tests.checks.notebooks import hidden_checks

    modules = _student_importable_modules()
    assert len(modules) > 30 and not any(m.__name__.startswith("hidden") for m in modules)
    hidden_names = _hidden_definitions()
    hidden_code = {}
    for a, names in hidden_names.items():
        module = hidden_checks(a)
        for n in names:
            obj = getattr(module, n)
            if inspect.isfunction(obj) and _code_of(obj):
                hidden_code[_code_of(obj)] = f"{a}.{n}"
    everything = set().union(*hidden_names.values())
    assert {"check_all", "link_bytes", "best_order", "serial_schedule", "CASES"} <= everything
    assert len(hidden_code) > 20
    found = []
    for m in modules:
        for n, obj in vars(m).items():
            if inspect.ismodule(obj):       # a package's submodule is not a definition
                continue
            own = getattr(obj, "__module__", m.__name__) == m.__name__
            if own and (n in everything or n.startswith("check_")):
                found.append(f"{m.__name__}.{n}")
            if own and inspect.isfunction(obj) and _code_of(obj) in hidden_code:
                found.append(f"{m.__name__}.{n} (the code of {hidden_code[_code_of(obj)]})")
    assert not found, found


def test_the_grading_sandbox_does_not_mount_the_course_folder():
    from grader.grading.sandbox import setup
    from grader.grading.config import load

    cfg = load(EXERCISES)
    for path in setup._read_only_paths(tuple(cfg.sandbox.extra_ro)):
        p = Path(path).resolve()
        assert p != HIDDEN.resolve() and p not in HIDDEN.resolve().parents, path
