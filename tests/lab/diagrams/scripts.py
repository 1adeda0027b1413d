"""The chapter scripts the diagrams are checked against, imported from chapters/scripts
(the files the pages show), and their functions read without importing them."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[3] / "chapters" / "scripts"


def script(name: str):
    """``chapters/scripts/<name>.py`` as a module (it imports its framework)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return __import__(name)


def function_ast(name: str, function: str) -> ast.FunctionDef:
    """The top-level function ``function`` of ``<name>.py``, parsed, not run."""
    tree = ast.parse((SCRIPTS / f"{name}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return node
    raise LookupError(f"{name}.py defines no function {function}")


def diagram_cells(page: str) -> list[tuple[dict, str]]:
    """The cells of ``chapters/<page>.md`` that draw one of grader.lab.diagrams: their
    options (the YAML block, parsed) and their code."""
    import re

    import yaml

    text = (SCRIPTS.parent / f"{page}.md").read_text()
    out = []
    for body in re.findall(r"```\{code-cell\} ipython3\n(.*?)\n```", text, flags=re.S):
        options = {}
        if body.startswith("---\n"):
            head, body = body[4:].split("\n---\n", 1)
            options = yaml.safe_load(head)
        if "grader.lab.diagrams" in body:
            out.append((options, body))
    return out
