"""Isolation of the grading kernel: bubblewrap + setpriv + prlimit, with no change to nbgrader.

nbgrader (through nbclient) starts a Jupyter kernel ``python3`` in the notebook's folder and
runs the student's cells and the hidden tests there. :func:`prepare` writes a kernelspec
``python3`` whose command is the trusted launcher :mod:`grader.grading.sandbox.kernel`, and
returns the environment (``JUPYTER_PATH`` pointing at it) and the traitlets config (ZMQ over
unix sockets in a folder both sides see: the sandbox has no network, not even the host's
loopback) for the grading process. The kernel then runs as the worker slot's uid, sees only
the system, Python, the ``grader`` package and its own folder (plus private ``/tmp``), has
no network and runs under resource limits (:class:`~grader.grading.config.Limits`).

Each submission gets its own folder (:func:`job`): the kernel's sockets, the grading side's
connection files and how the kernel ended, removed when the submission is graded, so
nothing of one student's kernels is there for the next. When a kernel ends, the launcher
records how (:func:`kernel_end`); :func:`describe_limit_hit` turns that, or an error a
cell raised, into a sentence naming the limit, for feedback.
``[sandbox] mode = "none"`` gives a plain kernel (trusted code only). See ``exercises/GRADING.md``.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from traitlets.config import Config

from ..config import Limits, SandboxConfig

__all__ = ["check", "prepare", "job", "kernel_end", "describe_limit_hit",
           "MACHINE_OOM", "TOOLS", "JOB_TMP"]

TOOLS = {"bwrap": "bubblewrap", "setpriv": "util-linux", "prlimit": "util-linux"}
_NONE_HINT = ('or set [sandbox] mode = "none" in exercises/course.toml to grade without '
              "isolation (only for code you trust)")
_SOCKET_PATH_MAX = 100  # a unix socket path has at most 107 bytes; the port is appended
JOB_TMP = "COURSE_JOB_TMP"    # the job's temporary folder (job), read by grader.ranks.relay
MACHINE_OOM = "machine-oom"   # kernel_end: the machine ran out of memory (not a limit hit)


def check(cfg: SandboxConfig) -> str | None:
    """``None`` if kernels can be isolated as ``cfg`` says, else what to do about it."""
    if cfg.mode == "none":
        return None
    if cfg.mode not in ("auto", "bwrap"):
        return f'[sandbox] mode = "{cfg.mode}" is not one of "auto", "bwrap", "none" (exercises/course.toml)'
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pkgs = " ".join(sorted({TOOLS[t] for t in missing}))
        return (f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed, so "
                f"student code cannot be isolated while grading: run `make grade-deps` (Debian: "
                f"apt-get install {pkgs}), {_NONE_HINT}.")
    if os.geteuid() != 0:
        return ("isolated grading must run as root: each kernel is switched to its worker "
                f"slot's uid ({cfg.uid_base} + slot) with setpriv, which needs root. Run the "
                f"grading command as root (e.g. with sudo), {_NONE_HINT}.")
    # bwrap installed but unable to make namespaces (a container without CAP_SYS_ADMIN, ...)
    probe = subprocess.run(["bwrap", "--unshare-pid", "--unshare-net", "--die-with-parent",
                            "--ro-bind", "/", "/", "--proc", "/proc", "true"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return (f"bubblewrap cannot create namespaces on this machine ({probe.stderr.strip()}): "
                f"grade on a machine (or container) that allows them, {_NONE_HINT}.")
    return None


def _plain_argv() -> list[str]:
    return [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]


def _read_only_paths(extra: tuple[str, ...]) -> list[str]:
    """What the kernel may read besides /usr and /etc: Python, the venv, ``grader``, extras."""
    import grader  # the repository's package (an editable install points here)

    paths = [sys.base_prefix, sys.prefix, str(Path(grader.__file__).parent), *extra]
    out: list[str] = []
    for p in sorted({os.path.realpath(p) for p in paths}):
        if p in ("/", "/usr", "/etc") or p.startswith(("/usr/", "/etc/")):
            continue
        if not any(p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def _grader_dir() -> str:
    import grader

    return os.path.realpath(Path(grader.__file__).parent)


def compile_package() -> None:
    """Write the bytecode of the ``grader`` package the sandbox shows, where it is missing or
    older than its source. A sandboxed kernel reads ``grader`` read-only (and is told not to
    write bytecode), so without this each kernel compiles the checks and the simulator it
    imports from source: 25-35 ms of CPU per kernel for a1 and a8 (``-X importtime``). Up to
    date it only reads the files' times (5 ms). Bytecode of a file that changes later is
    stale and ignored by Python, never run."""
    import compileall

    compileall.compile_dir(_grader_dir(), quiet=2)


def _venv_links() -> list[list[str]]:
    """``[target, path]`` of the virtualenv when its path is a symbolic link (a worktree's
    ``.venv``): the kernel starts Python by that path, so the sandbox has the link too."""
    if os.path.islink(sys.prefix):
        return [[os.path.realpath(sys.prefix), sys.prefix]]
    return []


def prepare(limits: Limits, cfg: SandboxConfig, slot: int,
            runtime_dir: Path) -> tuple[dict[str, str], Config]:
    """Kernelspec, settings and config so that kernels of worker ``slot`` start sandboxed.

    Returns the environment variables to set in the grading process (``JUPYTER_PATH``, and
    ``JUPYTER_RUNTIME_DIR`` so connection files stay in ``runtime_dir``) and a traitlets
    config to merge into nbgrader's (the worker merges it into each job's). Raises
    ``RuntimeError`` with :func:`check`'s message if isolation is asked for but unavailable.
    """
    runtime_dir = Path(runtime_dir).resolve()
    runtime_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(runtime_dir, 0o755)
    spec_dir = runtime_dir / "share" / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    env = {"JUPYTER_PATH": str(runtime_dir / "share" / "jupyter")}
    config = Config()
    spec = {"display_name": "Python 3 (grading)", "language": "python",
            "metadata": {"debugger": False}}
    if cfg.mode == "none":
        (spec_dir / "kernel.json").write_text(json.dumps(spec | {"argv": _plain_argv()}, indent=1))
        return env, config
    problem = check(cfg)
    if problem:
        raise RuntimeError(problem)

    compile_package()
    uid = cfg.uid_base + slot
    ipc_dir = runtime_dir / "ipc"
    ipc_dir.mkdir(exist_ok=True)
    # root's: the launcher makes the kernel's sockets here and hands them over as descriptors
    # (sandbox/kernel.py: listen); the kernel reads its connection file and writes nothing
    os.chown(ipc_dir, 0, 0)
    os.chmod(ipc_dir, 0o755)
    conn_dir = runtime_dir / "connections"  # the grading side's copies, root's only
    conn_dir.mkdir(exist_ok=True)
    os.chmod(conn_dir, 0o700)
    ip = str(ipc_dir / "k")
    if len(ip) + 8 > _SOCKET_PATH_MAX:
        raise ValueError(f"runtime_dir {runtime_dir} is too long for unix socket paths "
                         f"({ip}-<port> must stay under {_SOCKET_PATH_MAX} bytes): use a shorter one")
    settings = {"uid": uid, "gid": uid, "limits": asdict(limits),
                "ro": _read_only_paths(cfg.extra_ro), "ipc_dir": str(ipc_dir),
                "runtime_dir": str(runtime_dir), "python": sys.executable,
                "python_bin": os.path.dirname(sys.executable),
                "devices": sorted(str(p) for p in Path("/dev").glob("nvidia*")),
                "links": _venv_links(), "cgroups": True,
                # the grader package the grading process uses, first (the venv's editable
                # install may point at another checkout, which the sandbox does not show)
                "pythonpath": str(Path(_grader_dir()).parent)}
    settings_file = runtime_dir / "sandbox.json"
    settings_file.write_text(json.dumps(settings, indent=1))
    argv = [sys.executable, "-m", "grader.grading.sandbox.kernel", "--settings",
            str(settings_file), "{connection_file}"]
    # interrupts go through the control channel: a signal would reach the launcher, not the kernel
    (spec_dir / "kernel.json").write_text(
        json.dumps(spec | {"argv": argv, "interrupt_mode": "message"}, indent=1))
    env["JUPYTER_RUNTIME_DIR"] = str(conn_dir)
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = ip
    return env, config


@contextmanager
def job(runtime_dir: Path, cfg: SandboxConfig, slot: int):
    """A fresh folder below ``runtime_dir`` for one submission's kernels, removed afterwards:
    yields ``(folder, env, config)``. With isolation, ``folder/ipc`` (root's, read-only in
    the sandbox: the kernels' sockets, made by the launcher) and ``folder/conn`` (root's: the connection files, ``env``'s
    ``JUPYTER_RUNTIME_DIR``), and ``config`` points the kernels' sockets there; the launcher
    writes how each kernel ended to ``folder`` (:func:`kernel_end`). ``folder/tmp`` is the
    job's temporary folder (``env``'s ``COURSE_JOB_TMP``): the checks' rank folders, logs and
    launch folders (assignment 7) go there, so they are removed with ``folder`` whatever
    happened (a judge killed at its time limit cannot remove its own)."""
    Path(runtime_dir).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="j", dir=Path(runtime_dir).resolve()))
    config = Config()
    try:
        (folder / "tmp").mkdir()
        # sticky and open like /tmp, for a judge of another uid: only trusted processes of
        # this machine run outside a sandbox, and no sandbox binds it
        os.chmod(folder / "tmp", 0o1777)
        env: dict[str, str] = {JOB_TMP: str(folder / "tmp")}
        if cfg.mode != "none":
            os.chmod(folder, 0o711)
            (folder / "ipc").mkdir()
            os.chmod(folder / "ipc", 0o755)   # root's: nothing of the kernel's can be put there
            (folder / "conn").mkdir(mode=0o700)
            ip = str(folder / "ipc" / "k")
            if len(ip) + 8 > _SOCKET_PATH_MAX:
                raise ValueError(f"runtime folder {runtime_dir} is too long for unix socket "
                                 f"paths ({ip}-<port>): use a shorter one")
            env["JUPYTER_RUNTIME_DIR"] = str(folder / "conn")
            config.KernelManager.transport = "ipc"
            config.KernelManager.ip = ip
        yield folder, env, config
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def kernel_end(runtime_dir: Path) -> str | None:
    """How the last sandboxed kernel of this folder (:func:`prepare`'s or :func:`job`'s)
    ended: ``"SIGXCPU"``, ``"exit 0"``..., or why the sandbox ended it: ``"files-limit"``,
    ``"memory-limit"`` (its own limits), :data:`MACHINE_OOM` (the machine ran out of
    memory: a grading fault, not the student's).

    Read it when the kernel died while a cell ran (nbclient's ``DeadKernelError``): after a
    normal end it is ``"exit 0"``, or ``"SIGTERM"`` when the client stopped the kernel
    (nbgrader shuts kernels down "immediately", which is a SIGTERM), and now and then
    ``"SIGABRT"`` (CPython aborts at shutdown when ipykernel's daemon threads still hold
    stdout's lock; seen in CI after a clean close), so an end after a close says nothing
    about the student's code. ``None`` while no
    kernel has ended, or when the launcher itself was killed before it could say.
    """
    try:
        end = json.loads((Path(runtime_dir) / "kernel_end.json").read_text())
    except (OSError, ValueError):
        return None
    cause = {"files": "files-limit", "memory": "memory-limit",
             "machine-oom": MACHINE_OOM}.get(end.get("cause") or "")
    return cause or end["signal"] or f"exit {end['exit_code']}"


_SIGNALS = {
    "SIGXCPU": "the CPU time limit ({cpu_seconds} s of CPU time) was reached and the kernel was stopped",
    "SIGKILL": ("the kernel was killed (SIGKILL; not by the out-of-memory killer: memory "
                "limit {memory_gb:g} GB)"),
    "memory-limit": ("the memory limit ({memory_gb:g} GB for the notebook's processes together) "
                     "was reached and the kernel was stopped"),
    "files-limit": ("the limit on what a notebook may write ({kernel_files} files and folders "
                    "in its folder; {kernel_disk_mb} MB in its folder, /tmp and /dev/shm "
                    "together) was reached and the kernel was stopped"),
    "SIGXFSZ": "the file size limit ({file_size_mb} MB per file) was reached",
    "SIGSEGV": "the kernel crashed (SIGSEGV, a segmentation fault)",
}


def describe_limit_hit(what: str, limits: Limits) -> str | None:
    """A sentence naming the limit behind ``what``, or ``None`` if no limit explains it.

    ``what`` is a signal name from :func:`kernel_end` (``"SIGXCPU"``), an exception name
    (``"MemoryError"``), or an error's text (``"OSError: [Errno 27] File too large"``,
    ``"BlockingIOError: [Errno 11] Resource temporarily unavailable"``, a traceback).
    """
    values = asdict(limits)
    if what in _SIGNALS:
        return _SIGNALS[what].format(**values)
    if "MemoryError" in what or "Cannot allocate memory" in what or "std::bad_alloc" in what:
        return "the memory limit ({memory_gb:g} GB) was reached".format(**values)
    if "No space left on device" in what or f"[Errno {errno.ENOSPC}]" in what:
        # /tmp or /dev/shm full: each holds at most the disk budget (sandbox/kernel.py)
        return ("the limit on what a notebook may write ({kernel_disk_mb} MB in its folder, "
                "/tmp and /dev/shm together) was reached").format(**values)
    if "File too large" in what or f"[Errno {errno.EFBIG}]" in what:
        return "the file size limit ({file_size_mb} MB per file) was reached".format(**values)
    if ("Resource temporarily unavailable" in what or "can't start new thread" in what
            or "BlockingIOError" in what):
        return ("the process limit ({processes} processes and threads) was reached "
                "(too many processes or threads started)").format(**values)
    if what.startswith("KeyboardInterrupt"):  # how nbclient stops a cell that ran too long
        return "the time limit of a cell ({cell_timeout_s} s) was reached".format(**values)
    if "Too many open files" in what or f"[Errno {errno.EMFILE}]" in what:
        return "the open files limit ({open_files} files at once) was reached".format(**values)
    return None
