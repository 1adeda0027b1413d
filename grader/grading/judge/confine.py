"""The judge process with no privilege worth stealing: its identity, limits, path and folders.

The judge process (:mod:`grader.grading.judge.process`) runs the instructor's code, never the
student's, but it handles what the student's kernel sends, so it is built as if that code
could take it over. What a judge that is taken over has:

- **an identity of its own, not root**: before the first test cell (the first moment the
  kernel can send it anything) a judge started as root switches for good to the judge uid of
  its worker slot (:func:`judge_uid`: the slot's uid + :data:`JUDGE_UID_OFFSET`, gid the same,
  no supplementary groups, no capabilities, ``no_new_privs``); a judge that was not root
  keeps the grading user's uid (no sandbox: trusted code only, see GRADING.md);
- **a view of Python it can use, and no more**: where Python lives in a folder other users
  cannot enter (pyenv's ``/root``), the judge process covers that folder, in a mount
  namespace of its own, with an empty tmpfs holding only Python, the virtual environment
  and ``grader`` (:func:`open_views`, what bubblewrap does for the kernel);
- **what it needs to read, and nothing of the course folder**: the hidden checks are
  imported before the switch (:func:`grader.grading.hidden.preload`), the kernel's folder is
  opened once as a directory fd (the channel's socket is reached through it), and the judge
  uid cannot traverse the course folder afterwards (nbgrader's folders are root's);
- **a folder of its own to write in**: a fresh ``course-judge-*`` folder (its ``TMPDIR``
  and ``HOME``, mode 0700, the judge uid's), removed by the grading process when the judge
  process ends (:meth:`grader.grading.judge.process.JudgeProcess.kill`); its working
  directory is ``/``;
- **a clean import path and environment** (:func:`clean_path`, :func:`clean_env`): no empty
  entry, no working directory, nothing in the course folder or the kernel's folder, nothing
  a user other than the grading user can write (the ``torch.py`` a student wrote into the
  course folder is never imported); and no variable but those the checks use (no database
  URL, no hub password);
- **limits**: ``RLIMIT_DATA`` (:data:`JUDGE_MEMORY_BYTES`), ``RLIMIT_NPROC``,
  ``RLIMIT_NOFILE``, ``RLIMIT_FSIZE``, ``RLIMIT_CPU``, no core files; the grading process
  puts each judge process in a control group with the job's memory limit
  (:class:`grader.grading.judge.process.JudgeProcess`);
- **ranks only through a gate**: an a7 check starts student ranks in sandboxes of their own,
  which needs root; the judge asks a small root process it forked before the switch
  (:mod:`grader.grading.judge.rankgate`), which starts only that command, only for a fresh
  folder in the judge's own folder.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import stat
import sys
from typing import Any

__all__ = ["JUDGE_UID_OFFSET", "NOBODY", "JUDGE_MEMORY_BYTES", "judge_uid", "clean_path",
           "clean_env", "drop", "Confined"]

JUDGE_UID_OFFSET = 1000          # slot k's judge: uid_base + k + 1000 (61000 + k: its kernels)
NOBODY = 65534                   # a judge started as root for a kernel without a sandbox
JUDGE_MEMORY_BYTES = 3 * 2**30   # RLIMIT_DATA of each of the judge's processes
JUDGE_PROCESSES = 1024           # RLIMIT_NPROC of the judge uid (threads count: relays, torch)
JUDGE_CPU_SECONDS = 3600         # RLIMIT_CPU of each
RANK_ENV = "COURSE_RANK_ISOLATION"
JUDGE_OPEN_FILES = 1024
JUDGE_FILE_BYTES = 256 * 2**20

# variables the judge keeps (the checks read some, the frameworks others); everything else
# the grading process has (a database URL, COURSE_HUB_PASSWORD, a token) is dropped
_ENV_NAMES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "MPLBACKEND",
              "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "COURSE_FRAMEWORK",
              "COURSE_DIST_BACKEND", "NBGRADER_EXECUTION", "NBGRADER_VALIDATING",
              "PYDEVD_DISABLE_FILE_VALIDATION", "GLOG_minloglevel", "FLAGS_call_stack_level",
              "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "COURSE_RANK_ISOLATION", "TMPDIR")
_SECRET_WORDS = ("PASSWORD", "TOKEN", "SECRET", "KEY", "DB_URL", "DATABASE")


def judge_uid(settings: dict | None) -> int:
    """The uid a judge switches to: its slot's judge uid, or ``nobody`` without a sandbox."""
    if settings and isinstance(settings.get("uid"), int) and settings["uid"] > 0:
        return settings["uid"] + JUDGE_UID_OFFSET
    return NOBODY


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def clean_path(path: list[str], away: list[str], owners: tuple[int, ...] = (0,)) -> list[str]:
    """``path`` (``sys.path``) without what a student could have written to: no empty entry,
    nothing in one of the ``away`` folders (the working directory, the course folder, the
    kernel's folder), nothing owned by a uid not in ``owners`` or writable by others."""
    out = []
    for p in path:
        if not p or not os.path.isabs(p) or any(a and _inside(p, a) for a in away):
            continue
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_uid not in owners or st.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
            continue
        if p not in out:
            out.append(p)
    return out


def clean_env(env: dict[str, str]) -> dict[str, str]:
    """The judge's environment: the names it uses, never one that looks like a secret."""
    keep = {k: v for k, v in env.items()
            if (k in _ENV_NAMES or k.startswith(("COURSE_", "PADDLE_", "FLAGS_", "KMP_")))
            and not any(w in k.upper() for w in _SECRET_WORDS)}
    keep.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return keep


def _prctl(option: int, arg: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


class Confined:
    """What :func:`drop` left the judge: its uid, its folder, the kernel folder's fd, the
    rank gate's socket (or ``None``)."""

    def __init__(self, uid: int, tmp: str | None, folder_fd: int, gate: str | None,
                 dropped: bool) -> None:
        self.uid, self.tmp, self.folder_fd, self.gate = uid, tmp, folder_fd, gate
        self.dropped = dropped      # whether this process gave up root


def drop(*, settings_file: str | None, course_root: str | None, folder: str, tmp: str | None,
         rank_isolation: list | None) -> Confined:
    """Confine this (judge) process for good; see the module docstring. Called once, before
    the first test cell connects to the kernel."""
    from .. import hidden

    folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    if course_root:
        hidden.preload(course_root)        # (as the grading user: the course is root's)
    if os.geteuid() != 0:
        return Confined(os.geteuid(), None, folder_fd, None, False)
    settings = None
    if settings_file:
        st = os.stat(settings_file)
        if st.st_uid != 0 or st.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
            raise PermissionError(f"{settings_file}: not the grading user's own settings")
        with open(settings_file) as f:
            settings = json.load(f)
    uid = judge_uid(settings)
    if tmp:
        os.mkdir(tmp, 0o700)               # fails if anything is there already
        os.chown(tmp, uid, uid)
        # (COURSE_JOB_TMP: where the rank launcher looks for ranks' folders, the judge's own)
        os.environ["TMPDIR"] = os.environ["HOME"] = os.environ["COURSE_JOB_TMP"] = tmp
        import tempfile

        tempfile.tempdir = tmp
    gate = None
    if rank_isolation and settings is not None and tmp:
        from . import rankgate

        gate = rankgate.start(settings_file, tmp, uid)
        os.environ[RANK_ENV] = json.dumps(rankgate.client_command(gate))
    for res, value in ((resource.RLIMIT_DATA, JUDGE_MEMORY_BYTES),
                       (resource.RLIMIT_NPROC, JUDGE_PROCESSES),
                       (resource.RLIMIT_NOFILE, JUDGE_OPEN_FILES),
                       (resource.RLIMIT_FSIZE, JUDGE_FILE_BYTES), (resource.RLIMIT_CORE, 0),
                       (resource.RLIMIT_CPU, JUDGE_CPU_SECONDS)):
        hard = resource.getrlimit(res)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(res, (value, value))
    os.chdir("/")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _prctl(38, 1)                          # PR_SET_NO_NEW_PRIVS
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:                                  # never: the switch did not hold
        os._exit(70)
    return Confined(uid, tmp, folder_fd, gate, True)


def temp_base() -> str:
    """Where judges' folders go: the temp folder, if a judge uid can reach into it."""
    import tempfile

    base = os.path.realpath(tempfile.gettempdir())
    try:
        if all(os.stat(p).st_mode & stat.S_IXOTH for p in _ancestors(base)):
            return base
    except OSError:
        pass
    return "/tmp"


def _ancestors(path: str) -> list[str]:
    out = [path]
    while path != os.path.dirname(path):
        path = os.path.dirname(path)
        out.append(path)
    return out


def _closed(path: str) -> bool:
    try:
        return not os.stat(path).st_mode & stat.S_IXOTH
    except OSError:
        return False


def _mount(libc, source: bytes | None, target: bytes, fstype: bytes | None, flags: int,
           data: bytes | None = None) -> None:
    if libc.mount(source, target, fstype, flags, data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target.decode()}: {os.strerror(err)}")


def open_views(needed: list[str] | None = None) -> list[str]:
    """Make what the judge runs on (Python, the virtual environment, ``grader``) reachable
    for its unprivileged uid without opening anything else: in a mount namespace of this
    process's own, each folder on the way to them that other users may not enter (root's
    ``/root``, where pyenv keeps Python) is covered by an empty tmpfs (0755) that holds only
    those paths, bound from the real ones (what bubblewrap does for the kernel). Call as
    root, while this process has one thread; the folders covered."""
    if needed is None:
        import grader

        needed = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)),
                  os.path.dirname(os.path.abspath(grader.__file__))]
    needed = sorted({os.path.realpath(p) for p in needed})
    libc = ctypes.CDLL(None, use_errno=True)
    covered: list[str] = []
    for _ in range(8):      # a covered folder's bound child may hold closed folders too
        closed = sorted({a for p in needed for a in _ancestors(p)[1:] if _closed(a)},
                        key=len)
        if not closed:
            break
        if not covered:
            if libc.unshare(0x00020000) != 0:          # CLONE_NEWNS
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) failed")
            _mount(libc, None, b"/", None, 0x4000 | (1 << 18))   # MS_REC | MS_PRIVATE
        top = closed[0]
        children = sorted({p[len(top) + 1:].split("/")[0] for p in needed
                           if p.startswith(top + "/")})
        import tempfile

        stage = tempfile.mkdtemp(prefix="course-judge-view-", dir="/")
        try:
            for c in children:
                os.mkdir(os.path.join(stage, c))
                _mount(libc, os.path.join(top, c).encode(), os.path.join(stage, c).encode(),
                       None, 0x1000 | 0x4000)           # MS_BIND | MS_REC
            _mount(libc, b"tmpfs", top.encode(), b"tmpfs", 0x2 | 0x4,     # nosuid, nodev
                   b"mode=0755,size=1m")
            for c in children:
                os.mkdir(os.path.join(top, c), 0o755)
                _mount(libc, os.path.join(stage, c).encode(), os.path.join(top, c).encode(),
                       None, 0x2000)                    # MS_MOVE
        finally:
            for c in children:
                try:
                    os.rmdir(os.path.join(stage, c))
                except OSError:
                    pass
            try:
                os.rmdir(stage)
            except OSError:
                pass
        covered.append(top)
    return covered


def settings_of(isolation: Any) -> str | None:
    """The settings file named by ``$COURSE_RANK_ISOLATION``'s command
    (``[python, -m, grader.grading.sandbox.rank, SETTINGS]``), if that is what it is."""
    try:
        argv = json.loads(isolation) if isinstance(isolation, str) else isolation
    except ValueError:
        return None
    if (isinstance(argv, list) and len(argv) == 4 and argv[1:3] == ["-m", "grader.grading.sandbox.rank"]
            and isinstance(argv[3], str)):
        return argv[3]
    return None


def identity() -> dict:
    """This process's uids, for tests and the note in GRADING.md."""
    return {"uid": os.getuid(), "euid": os.geteuid(), "groups": os.getgroups(),
            "path": list(sys.path), "cwd": os.getcwd()}
