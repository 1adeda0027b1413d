"""nbgrader command lines for the tests that run ``python -m nbgrader`` themselves.

The options are the configuration the grading worker merges into nbgrader's
(:func:`grader.grading.sandbox.crashes.autograde_config`), spelled as command-line options,
so these tests grade with what production configures, not with a copy of it.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from grader.grading.config import Limits
from grader.grading.sandbox.crashes import autograde_config


def options(config) -> list[str]:
    """A traitlets ``Config`` as ``--Section.key=value`` options (classes by dotted name)."""
    out = []
    for section, values in config.items():
        for key, value in values.items():
            if isinstance(value, list):
                value = repr([v if isinstance(v, str) else f"{v.__module__}.{v.__qualname__}"
                              for v in value])
            out.append(f"--{section}.{key}={value}")
    return out


def autograde_options(executor: type, trace_file: Path, skip=(), **limits) -> list[str]:
    """Options that autograde with ``executor`` under :class:`Limits` (defaults, or the given
    values, e.g. ``cell_timeout_s=8``), writing the crash trace to ``trace_file``."""
    return options(autograde_config(replace(Limits(), **limits), executor, trace_file, skip))


def nbgrader(course: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """``python -m nbgrader ARGS`` on ``course``, with this Python's tools on the PATH."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return subprocess.run([sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course}"],
                          cwd=course, env=env, capture_output=True, text=True, timeout=timeout)
