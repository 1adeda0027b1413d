"""The repository's shape that every user relies on."""
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_top_level_layout():
    for name in ("_config.yml", "_toc.yml", "README.md", "chapters", "exercises", "grader",
                 "tests", "pyproject.toml", "constraints.txt", "Makefile", ".ci/run"):
        assert (ROOT / name).exists(), name


def test_readme_gives_the_two_commands_and_ci_runs_one_of_them():
    readme = (ROOT / "README.md").read_text()
    assert "make book" in readme and "make test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def test_every_dependency_is_pinned_exactly_in_constraints():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not pinned exactly: {line}"
            pins[name.lower().replace("_", "-")] = version
    for must in ("torch", "paddlepaddle", "jupyter-book", "nbgrader", "matplotlib", "pytest",
                 "ipywidgets", "selenium", "jupytext"):
        assert must in pins, must
    assert pins["jupyter-book"] == "1.0.4.post1" and pins["torch"] == "2.13.0"


def test_chapters_are_myst_markdown_and_no_notebook_with_outputs_is_committed():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert not [f for f in tracked if f.startswith("chapters/") and f.endswith(".ipynb")]
    for f in tracked:
        # Sample submissions are what students hand in, broken ones included on purpose
        # (the grader must cope with invalid JSON); the rule is for the course's own notebooks.
        if f.endswith(".ipynb") and not f.startswith("exercises/submitted/"):
            nb = json.loads((ROOT / f).read_text())
            assert not any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), f
    for md in (ROOT / "chapters").glob("*.md"):
        text = md.read_text()
        if "{code-cell}" in text:
            assert text.startswith("---\njupytext:"), f"{md.name} lacks the jupytext header"


def _unpaired_sections(text: str) -> list[str]:
    """Headings of the sections that show cells of one framework and none of the other."""
    out, fence, lines = [], None, []
    for line in text.splitlines():  # headings only outside code fences (comments are not)
        m = re.match(r"^(`{3,}|~{3,})", line)
        if m and fence is None:
            fence = m.group(1)
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is None and line.startswith("#"):
            line = "\x00" + line
        lines.append(line)
    for section in "\n".join(lines).split("\x00"):
        tags = [t for t in re.findall(r":tags: \[([^\]]*)\]", section)
                if "remove-cell" not in t]  # hidden guards of the prose are not tabs
        torch_cells = sum(bool(re.search(r"\btorch\b", t)) for t in tags)
        paddle_cells = sum(bool(re.search(r"\bpaddle\b", t)) for t in tags)
        # a tab with no cells here says why in its own words (a div only it shows)
        silent = "paddle" if torch_cells else "torch"
        if bool(torch_cells) != bool(paddle_cells) and f":::{{div}} only-{silent}" not in section:
            out.append(f"{section.splitlines()[0]!r}: {torch_cells} torch vs {paddle_cells} paddle")
    return out


def test_framework_cells_come_in_pairs():
    """Where a section of a chapter has PyTorch cells it has Paddle ones, and the other way
    round (each tab is its framework's own code, so the counts may differ: Paddle may need
    a cell more for what PyTorch does in one), or the tab without cells says why in prose
    of its own (chapters/scale.md: Paddle has no fake process group to track with)."""
    for md in (ROOT / "chapters").glob("*.md"):
        assert not _unpaired_sections(md.read_text()), (md.name, _unpaired_sections(md.read_text()))


def test_an_unpaired_section_is_found():
    page = ("# T\n## A\n```{code-cell}\n:tags: [torch]\n```\n```{code-cell}\n:tags: [paddle]\n```\n"
            "## B\n```{code-cell}\n:tags: [torch, remove-input]\n```\n")
    assert [u.split(":")[0] for u in _unpaired_sections(page)] == ["'## B'"]
    said = page + ":::{div} only-paddle\nNo Paddle cells here: it has no such tool.\n:::\n"
    assert _unpaired_sections(said) == []                       # the silent tab says why
    other = page + ":::{div} only-torch\nA note for the torch tab.\n:::\n"
    assert [u.split(":")[0] for u in _unpaired_sections(other)] == ["'## B'"]

# --- The package's shape (issue 23): one place per chapter, the exercises' machinery
# beside the checks, and the imports that the trust boundary rules out. -------------------

def _imports_of(path: Path) -> set[str]:
    """Every module a file of ``grader`` imports (module level or inside functions), with
    relative imports resolved to dotted names."""
    import ast

    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}  # `from pkg import module`
    return out


def _module_files() -> dict[str, Path]:
    files = {}
    for f in (ROOT / "grader").rglob("*.py"):
        dotted = ".".join(f.relative_to(ROOT).with_suffix("").parts)
        files[dotted.removesuffix(".__init__")] = f
    return files


def _closure(start: str, files: dict[str, Path]) -> set[str]:
    """The modules of ``grader`` that ``start`` reaches through its imports (and the
    packages above each, whose ``__init__`` runs first)."""
    seen, todo = set(), [m for m in files if m == start or m.startswith(start + ".")]
    while todo:
        m = todo.pop()
        if m in seen or m not in files:
            continue
        seen.add(m)
        parts = m.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += [i for i in _imports_of(files[m]) if i in files]
    return seen


def test_each_chapter_with_helpers_has_a_package_named_after_its_page():
    lab = ROOT / "grader" / "lab"
    pages = {p.stem for p in (ROOT / "chapters").glob("*.md")}
    for pkg in sorted(p for p in lab.iterdir() if (p / "__init__.py").exists()):
        doc = (pkg / "__init__.py").read_text()
        if pkg.name in ("core", "planner", "diagrams"):   # shared by several pages
            continue
        assert pkg.name in pages, f"grader/lab/{pkg.name}/ is named after no chapter"
        assert f"chapters/{pkg.name}.md" in doc, f"grader/lab/{pkg.name}/__init__.py must name its page"
    # no chapter's helpers stand loose beside the shared machinery, told apart by a prefix
    loose = [p.name for p in lab.glob("*.py")
             if re.match(r"(dp|plan|shard)_", p.name) or p.stem in ("relay", "rank_stub")]
    assert not loose, loose
    assert not (lab / "sim").exists(), "the simulated GPUs serve the exercises: grader/sim"


def test_nothing_in_lab_imports_grading_or_the_exercises_machinery():
    files = _module_files()
    reached = _closure("grader.lab", files)
    bad = sorted(m for m in reached if m.startswith(("grader.grading", "grader.checks",
                                                     "grader.sim", "grader.ranks")))
    assert not bad, bad


def test_what_runs_a_students_code_never_imports_a_reference_answer():
    """The simulated GPUs and a7's ranks are handed to (or run) a student's code, and the
    public checks run in the student's kernel: none of them reaches the loader of the hidden
    checks, the judge, or the hidden modules themselves."""
    files = _module_files()
    for start in ("grader.sim", "grader.ranks", "grader.checks", "grader.grading.sandbox",
                  "grader.handin"):     # (the hand-in runs on the student's own machine)
        reached = _closure(start, files)
        imported = set().union(*(_imports_of(files[m]) for m in reached))
        assert "grader.grading.hidden" not in reached, (start, "grader.grading.hidden")
        assert not [i for i in imported if i.startswith(("exercises", "hidden"))], start
        if start != "grader.checks":  # a7's public check names the judge's proxies lazily
            assert not [m for m in reached if m.startswith("grader.grading.judge")], start
