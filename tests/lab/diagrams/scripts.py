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
