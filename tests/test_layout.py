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
        if bool(torch_cells) != bool(paddle_cells):
            out.append(f"{section.splitlines()[0]!r}: {torch_cells} torch vs {paddle_cells} paddle")
    return out


def test_framework_cells_come_in_pairs():
    """Where a section of a chapter has PyTorch cells it has Paddle ones, and the other way
    round (each tab is its framework's own code, so the counts may differ: Paddle may need
    a cell more for what PyTorch does in one)."""
    for md in (ROOT / "chapters").glob("*.md"):
        assert not _unpaired_sections(md.read_text()), (md.name, _unpaired_sections(md.read_text()))


def test_an_unpaired_section_is_found():
    page = ("# T\n## A\n```{code-cell}\n:tags: [torch]\n```\n```{code-cell}\n:tags: [paddle]\n```\n"
            "## B\n```{code-cell}\n:tags: [torch, remove-input]\n```\n")
    assert [u.split(":")[0] for u in _unpaired_sections(page)] == ["'## B'"]