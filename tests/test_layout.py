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


def test_framework_cells_come_in_pairs():
    """Where a chapter has a PyTorch cell it has the Paddle sibling, and the other way round."""
    for md in (ROOT / "chapters").glob("*.md"):
        text = md.read_text()
        torch_cells = len(re.findall(r":tags: \[[^\]]*\btorch\b", text))
        paddle_cells = len(re.findall(r":tags: \[[^\]]*\bpaddle\b", text))
        assert torch_cells == paddle_cells, f"{md.name}: {torch_cells} torch vs {paddle_cells} paddle cells"
