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
ranks: the relays, trusted, stay outside).

Like the kernel, each rank runs in a user namespace of its own with a fresh session keyring
and the seccomp filter (:mod:`grader.grading.sandbox.confine`), and in a **control group of
its own** (:class:`grader.grading.sandbox.bounds.Box`) with the job's ``memory_gb`` and
``processes``: its memory-backed ``/tmp`` and ``/dev/shm`` count, which ``RLIMIT_AS`` does
not see. Where this machine gives no control group, the rank's log says so and ``RLIMIT_AS``
alone bounds it. This process spawns ``bwrap`` and waits (bubblewrap's ``--die-with-parent``
ties the rank to it, and it dies with the process that started it); on ``SIGTERM`` it ends
the rank and its group; when the rank has ended it removes the group and writes how the rank
ended as the last line of its stderr (the rank's log, which the relay quotes when a rank
ends without a result): ``sandbox: ... {json}`` with ``cause`` ("memory" when its group's
limit stopped it), ``peak`` and ``limit`` in bytes.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile

from . import bounds
from .kernel import _die_with_me, _refuse_workdir, bwrap_command, describe_status

__all__ = ["ENV", "command", "isolation", "main", "run"]

ENV = "COURSE_RANK_ISOLATION"     # read by grader.ranks.relay
PREFIX = "course-rank-"


JOB_TMP = "COURSE_JOB_TMP"        # the job's temporary folder (sandbox.setup.job)


def isolation(settings_file: str) -> dict[str, str]:
    """The environment that makes :mod:`grader.ranks.relay` start student ranks this way,
    with their folders in this job's temporary folder (``$COURSE_JOB_TMP`` of the grading
    process, set by :func:`grader.grading.sandbox.setup.job`) when there is one."""
    env = {ENV: json.dumps([sys.executable, "-m", __name__, settings_file])}
    if os.environ.get(JOB_TMP):
        env[JOB_TMP] = os.environ[JOB_TMP]
    return env


def temp_root() -> str:
    """Where ranks' folders are: the job's temporary folder, or the system's."""
    tmp = os.environ.get(JOB_TMP)
    return os.path.realpath(tmp if tmp and os.path.isdir(tmp) else tempfile.gettempdir())


def command(settings: dict, folder: str, argv: list[str]) -> list[str]:
    """bwrap + setpriv + prlimit + confine + ``argv``, binding ``folder`` as the only writable
    folder."""
    # the kernel's command binds its socket folder read-only too: a rank names its own folder
    # there instead (then bound once, writable), so nothing is shared with another rank
    return bwrap_command(dict(settings, ipc_dir=folder), folder, "", command=list(argv))


def _refuse(folder: str, settings: dict) -> str | None:
    real = os.path.realpath(folder)
    st = os.lstat(folder)
    if (real != os.path.abspath(folder) or not stat.S_ISDIR(st.st_mode)
            or os.path.dirname(real) != temp_root()
            or not os.path.basename(real).startswith(PREFIX)):
        return (f"refusing {folder}: a rank's folder is a fresh {PREFIX}* folder in the job's "
                f"temporary folder ({temp_root()})")
    runtime = settings["runtime_dir"].rstrip("/") + "/"
    if (os.environ.get(JOB_TMP) and temp_root() == os.path.realpath(os.environ[JOB_TMP])
            and temp_root().startswith(runtime) and os.path.basename(temp_root()) == "tmp"):
        # the job's temporary folder is below the runtime folder (sandbox.setup.job): a fresh
        # rank folder directly in it is the rank's own, not a runtime path
        return _refuse_workdir(real, dict(settings, runtime_dir="/nonexistent-runtime"))
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
    return run_rank(settings, full)


def _gb(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.2f} GB"


def run_rank(settings: dict, full: list[str]) -> int:
    """Start ``full`` in a control group of its own, wait, remove the group, say how it ended."""
    lim = settings["limits"]
    mem = int(lim["memory_gb"] * 2**30)
    box = None
    if settings.get("cgroups", True):
        bounds.sweep(f"{PREFIX}{settings['uid']}-")
        box = bounds.Box.create(f"{PREFIX}{settings['uid']}-{os.getpid()}", mem,
                                lim["processes"] + 16)
    if box is None:
        print(f"sandbox: no control group on this machine (or [sandbox] cgroups = false): this "
              f"rank is bounded by RLIMIT_AS ({_gb(mem)}) alone, its memory-backed /tmp and "
              f"/dev/shm are not counted", file=sys.stderr, flush=True)
    def start() -> None:
        _die_with_me()
        if box is not None:
            box.add(os.getpid())

    proc = subprocess.Popen(full, start_new_session=True, preexec_fn=start,
                            stdin=subprocess.DEVNULL)
    stopped: list[int] = []

    def stop(signum, frame) -> None:
        stopped.append(signum)
        proc.kill()
        if box is not None:
            box.kill()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = proc.wait()
    end = describe_status(code) | {"cgroup": box is not None, "limit": mem, "cause": None,
                                   "peak": box.peak() if box is not None else None}
    if stopped:
        end["cause"] = "stopped"
    else:   # the launcher's rule: only this rank's group's own accounting blames the machine
        end["cause"] = bounds.cause(end, None, box)
    if box is not None:
        box.remove()
    said = {"memory": f"the rank was stopped at its memory limit of {_gb(mem)} (its "
                      f"processes and its /tmp and /dev/shm together; peak {_gb(end['peak'])})",
            "machine-oom": "the machine ran out of memory (not this rank's limit)",
            "stopped": "the rank was stopped by the grader"}.get(end["cause"] or "",
                                                                  "the rank's process ended")
    print(f"sandbox: {said} {json.dumps(end)}", file=sys.stderr, flush=True)
    return end["exit_code"] if end["exit_code"] is not None else 128 + 9


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
