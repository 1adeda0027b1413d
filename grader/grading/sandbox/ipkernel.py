"""A grading kernel's entry point: ``python -m grader.grading.sandbox.ipkernel -f CONNECTION``.

What :func:`grader.grading.sandbox.kernel.bwrap_command` runs, last, inside the sandbox, in
place of ``python -m ipykernel_launcher``, and the same thing with one part left out: the
debugger. ipykernel imports ``debugpy`` at start-up whenever it is installed (0.1 s of CPU of
the 0.6-0.9 s a grading kernel costs in all, measured with ``-X importtime`` and
``bench/grading_cpu.py``), and a kernel that nbgrader drives never receives a debug request.
Marking ``debugpy`` as not importable is ipykernel's own "no debugger here" path
(``ipykernel.debugger._is_debugpy_available`` is then false); in the student's code
``import debugpy`` raises ``ImportError``.

Otherwise it does what ``ipykernel_launcher`` does: the working directory (the student's
folder, which ``-m`` puts first on ``sys.path``) is taken off the path while ipykernel
loads, and IPython puts it back (as ``''``, after the standard library) before the first
cell, so that a student's helper module next to the notebook imports as it does under
plain nbgrader.
"""
from __future__ import annotations

import os
import sys


def main() -> None:
    if sys.path and (sys.path[0] == "" or os.path.abspath(sys.path[0]) == os.getcwd()):
        del sys.path[0]
    sys.modules["debugpy"] = None   # type: ignore[assignment]  (an import of it fails)
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
