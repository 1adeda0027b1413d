"""One student rank of a collective check, alone in the sandbox.

``python -m grader.grading.sandbox.rank SETTINGS FOLDER -- COMMAND...`` (as root) runs
``COMMAND`` the way :mod:`grader.grading.sandbox.kernel` runs a kernel (bubblewrap, the
slot's uid, no capabilities, the limits of ``course.toml``, no network, the system and Python
read-only), except that the only folder it sees read-write is ``FOLDER``, a fresh folder
of its own, and not the slot's socket folder: two ranks started this way share no file, no
network namespace and no process namespace, with each other or with the student's kernel.

:class:`grader.grading.judge.executor.JudgedExecute` puts ``[python, -m, grader.grading.sandbox.rank,
SETTINGS]`` in ``$COURSE_RANK_ISOLATION`` when the notebook's kernel is sandboxed, and
:class:`grader.ranks.relay.StudentRanks` starts each student rank behind it (assignment 7's
ranks: the relays, trusted, stay outside). The process ``exec`` s ``bwrap``, so bubblewrap's
``--die-with-parent`` ties the rank to the process that started it.
"""
from __future__ import annotations

import json
import os
import stat
import sys
import tempfile

from .kernel import _refuse_workdir, bwrap_command

__all__ = ["ENV", "command", "isolation", "main"]

ENV = "COURSE_RANK_ISOLATION"     # read by grader.ranks.relay
PREFIX = "course-rank-"


def isolation(settings_file: str) -> dict[str, str]:
    """The environment that makes :mod:`grader.ranks.relay` start student ranks this way."""
    return {ENV: json.dumps([sys.executable, "-m", __name__, settings_file])}


def command(settings: dict, folder: str, argv: list[str]) -> list[str]:
    """bwrap + setpriv + prlimit + ``argv``, binding ``folder`` as the only writable folder."""
    # the kernel's command binds the slot's socket folder too: a rank gets its own folder
    # there instead (bound twice, harmless), so nothing is shared with another rank
    cmd = bwrap_command(dict(settings, ipc_dir=folder), folder, "")
    kernel = [settings["python"], "-m", "ipykernel_launcher", "-f", ""]
    for i in range(len(cmd) - len(kernel), -1, -1):
        if cmd[i:i + len(kernel)] == kernel:
            return cmd[:i] + list(argv)
    raise RuntimeError("kernel.bwrap_command changed: no kernel command to replace")


def _refuse(folder: str, settings: dict) -> str | None:
    real = os.path.realpath(folder)
    st = os.lstat(folder)
    if (real != os.path.abspath(folder) or not stat.S_ISDIR(st.st_mode)
            or os.path.dirname(real) != os.path.realpath(tempfile.gettempdir())
            or not os.path.basename(real).startswith(PREFIX)):
        return f"refusing {folder}: a rank's folder is a fresh {PREFIX}* folder in the temp folder"
    return _refuse_workdir(real, settings)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m grader.grading.sandbox.rank SETTINGS FOLDER -- COMMAND...",
              file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        settings = json.load(f)
    folder, cmd = argv[1], argv[3:]
    reason = _refuse(folder, settings)
    if reason:
        print(reason, file=sys.stderr)
        return 2
    os.lchown(folder, settings["uid"], settings["gid"])
    os.chmod(folder, 0o700)
    full = command(settings, os.path.realpath(folder), cmd)
    os.execvp(full[0], full)
    return 127   # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
