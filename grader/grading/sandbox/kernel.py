"""The trusted launcher of a sandboxed grading kernel: ``python -m grader.grading.sandbox.kernel``.

A kernelspec written by :func:`grader.grading.sandbox.setup.prepare` runs this module, as root, in
place of ``ipykernel_launcher``. It takes the folder it is started in (nbclient starts the
kernel in the notebook's folder, ``<course>/autograded/<student>/<assignment>``) as the only
place the kernel may write, and runs the real kernel as::

    bwrap (no network, own pid/ipc/uts namespaces, read-only system and Python, this folder)
      setpriv (the slot's uid and gid, no groups, no capabilities, no new privileges)
        prlimit (CPU time, processes, file size, open files; no core files; address
                 space only where no memory control group bounds the kernel)
          confine (own user namespace and session keyring, seccomp filter: sandbox/confine.py)
            python -m grader.grading.sandbox.ipkernel -f <connection file>
                (ipykernel_launcher without its debugger: sandbox/ipkernel.py)

It spawns and waits (it does not ``exec``) so that it can forward ``SIGINT``/``SIGTERM`` to
the kernel and write how the kernel ended (exit status or signal, and why: a limit of the
sandbox or the machine out of memory) to a file the kernel cannot reach, read back by
:func:`grader.grading.sandbox.setup.kernel_end`. Meanwhile it bounds the whole sandbox: a control
group of its own where the machine allows one (:mod:`grader.grading.sandbox.bounds`: memory and
processes of all the kernel's processes together), and a watch on what the kernel writes
that ends it when its folder holds more than ``kernel_files`` entries, or its folder, ``/tmp``
and ``/dev/shm`` together more than ``kernel_disk_mb`` MB (one budget for every place it can
write).
The kernel's socket folder is the one its connection file names (one per submission, made
by :func:`grader.grading.sandbox.setup.job`): root's, and bound read-only into the sandbox.
This launcher makes the kernel's sockets there, listening, before the kernel starts, and hands
them to it as open descriptors (:func:`listen`; the kernel's entry point binds ZeroMQ to them,
:mod:`grader.grading.sandbox.ipkernel`). So the grading process connects by a path that
nothing of the student's can write: a kernel cannot put a link (to another kernel's socket,
a judge's) where its socket was, because it cannot write the folder at all.
Only the standard library is imported here: this runs for every kernel start.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

from . import bounds

# environment variables the kernel sees from the grading process, by name: everything else
# (a database URL, COURSE_HUB_PASSWORD, a token) is dropped by --clearenv
PASS_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "MPLBACKEND",
            "PYDEVD_DISABLE_FILE_VALIDATION", "CUDA_VISIBLE_DEVICES",
            "COURSE_FRAMEWORK", "COURSE_DIST_BACKEND",
            # nbgrader tells notebooks they are being graded (cells that run real
            # experiments skip themselves then)
            "NBGRADER_EXECUTION", "NBGRADER_VALIDATING")

# the thread pools of BLAS and OpenMP (numpy's OpenBLAS, MKL, torch, Paddle): ``[limits]
# kernel_threads`` each, whatever the grading process has (see :func:`thread_env`)
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# the kernel's listening sockets, ``{"<path>": fd}`` (JSON): read by sandbox/ipkernel.py
SOCKETS_ENV = "COURSE_KERNEL_SOCKETS"
# the ports of a connection file, one socket each
PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
# a kernel's memory-backed folders: tmpfs, counted in its disk budget with its folder
SCRATCH = ("/tmp", "/dev/shm")
# run inside the sandbox by path (the grader package is bound read-only), with -I -S
CONFINE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "confine.py")


def _inside(path: str, parents: list[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parents
    return [str(p) for p in reversed(parts) if str(p) != "/"]


def _cap(res: int, value: int) -> int:
    """``value``, or less if this process's hard limit is lower: after setpriv, prlimit cannot
    raise a hard limit the grading process was started with (nor can a root without
    CAP_SYS_RESOURCE), and would fail instead of starting the kernel."""
    hard = resource.getrlimit(res)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def thread_env(limits: dict) -> dict[str, str]:
    """The variables that size a kernel's (or rank's) BLAS and OpenMP thread pools.

    The workers already keep every core busy (two per core, each with its kernel), so a
    kernel's pools get ``kernel_threads`` threads (default 1), not one per core: numpy's
    OpenBLAS starts one thread per core at import and they spin (0.1 s of CPU per kernel
    on 2 cores, which RLIMIT_CPU charges to the student), and several kernels' pools on the
    same cores only take turns."""
    n = str(int(limits.get("kernel_threads", 1)))
    return {name: n for name in THREAD_VARS}


def bwrap_command(settings: dict, workdir: str, connection_file: str,
                  kernel_args: list[str] = (), status_fd: int | None = None,
                  ipc_dir: str | None = None, command: list[str] | None = None,
                  sockets: dict[str, int] | None = None,
                  scratch_bytes: int | None = None) -> list[str]:
    """The whole command line (bwrap, setpriv, prlimit, confine, kernel) for one kernel in
    ``workdir``.

    ``kernel_args`` are the options the client adds (nbclient:
    ``--HistoryManager.hist_file=:memory:``), passed on to the kernel; bwrap writes the pid
    of the namespace's init (the kernel's parent) to ``status_fd``; ``ipc_dir``: this
    submission's socket folder (default: the slot's, ``settings["ipc_dir"]``); ``command``:
    what to run in place of the kernel (a student rank, :mod:`grader.grading.sandbox.rank`);
    ``sockets``: the kernel's listening sockets, ``{path: fd}`` (:func:`listen`), passed on
    by descriptor. The socket folder is bound read-only (unless it is ``workdir``, as for a
    rank). ``/tmp`` and ``/dev/shm`` are memory-backed, at most ``scratch_bytes`` each
    (default ``memory_gb``; a kernel's launcher gives ``kernel_disk_mb``, the budget its watch
    counts them in with the folder). Last before it, :mod:`grader.grading.sandbox.confine`
    moves into a user namespace of its own, joins a fresh session keyring and installs the
    seccomp filter."""
    lim = settings["limits"]
    uid, gid = settings["uid"], settings["gid"]
    mem = int(lim["memory_gb"] * 2**30)
    scratch = mem if scratch_bytes is None else min(mem, scratch_bytes)
    cmd = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
           "--unshare-cgroup-try", "--die-with-parent", "--new-session",
           "--hostname", "grading-sandbox"]
    if status_fd is not None:
        cmd += ["--json-status-fd", str(status_fd)]
    # the system: /usr read-only, the /bin, /lib... links (or folders) as on this machine
    cmd += ["--ro-bind", "/usr", "/usr"]
    for p in SYSTEM_LINKS:
        if os.path.islink(p):
            cmd += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            cmd += ["--ro-bind", p, p]
    cmd += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev",
            # private scratch space, in memory (the control group counts it; RLIMIT_AS does
            # not); a kernel's, at most its disk budget each, is counted in that budget too
            "--perms", "1777", "--size", str(scratch), "--tmpfs", "/dev/shm",
            "--perms", "1777", "--size", str(scratch), "--tmpfs", "/tmp"]
    for dev in settings.get("devices", []):
        cmd += ["--dev-bind", dev, dev]
    binds = [(p, "--ro-bind") for p in settings["ro"]]
    binds += [(workdir, "--bind")]
    ipc_dir = ipc_dir or settings["ipc_dir"]
    if ipc_dir != workdir:   # root's: the kernel reads its connection file there, writes nothing
        binds += [(ipc_dir, "--ro-bind")]
    mounted = ["/usr", "/etc"]  # folders inside these exist already (not inside the tmpfs /tmp)
    made: set[str] = set()
    for path, how in sorted(binds, key=lambda b: b[0]):
        # folders bwrap makes on the way to a mount point are root's 0700 unless told:
        # 0755 so that the kernel's uid can walk to /root/.pyenv/versions/<v> and the like
        for anc in _ancestors(path):
            if anc in made or anc in ("/tmp", "/dev/shm") or _inside(anc, mounted):
                continue
            cmd += ["--perms", "0755", "--dir", anc]
            made.add(anc)
        cmd += [how, path, path]
        mounted.append(path)
    for target, link in settings.get("links", []):
        for anc in _ancestors(link):
            if anc not in made and not _inside(anc, mounted):
                cmd += ["--perms", "0755", "--dir", anc]
                made.add(anc)
        cmd += ["--symlink", target, link]
    env = {"HOME": "/tmp", "USER": "student", "LOGNAME": "student",
           "PATH": os.pathsep.join([settings["python_bin"], "/usr/local/bin", "/usr/bin", "/bin"]),
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
           "MPLCONFIGDIR": "/tmp/.matplotlib", "LANG": "C.UTF-8",
           **({"PYTHONPATH": settings["pythonpath"]} if settings.get("pythonpath") else {}),
           # ipykernel: its parent is the namespace's pid 1 (no parent polling, no banner)
           "JPY_PARENT_PID": "1", **thread_env(lim),
           **({SOCKETS_ENV: json.dumps(sockets)} if sockets else {})}
    for k, v in os.environ.items():
        if k in PASS_ENV:
            env[k] = v
    cmd += ["--chdir", workdir, "--clearenv"]
    for k, v in sorted(env.items()):
        cmd += ["--setenv", k, v]
    cmd += ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs",
            "--bounding-set=-all", "--inh-caps=-all",
            # RLIMIT_CPU: SIGXCPU at the soft limit; the hard one (a SIGKILL) only if ignored
            # memory: the control group where there is one (bounds.memory_groups), not the
            # address space, which stopped `import torch` at 1 GB; else RLIMIT_AS alone
            "prlimit", *([] if bounds.memory_groups(settings)
                         else [f"--as={_cap(resource.RLIMIT_AS, mem)}"]),
            f"--cpu={_cap(resource.RLIMIT_CPU, lim['cpu_seconds'])}:"
            f"{_cap(resource.RLIMIT_CPU, lim['cpu_seconds'] + 5)}",
            f"--nproc={_cap(resource.RLIMIT_NPROC, lim['processes'])}",
            f"--fsize={_cap(resource.RLIMIT_FSIZE, int(lim['file_size_mb'] * 2**20))}",
            f"--nofile={_cap(resource.RLIMIT_NOFILE, lim['open_files'])}", "--core=0", "--",
            settings["python"], "-I", "-S", CONFINE, "--"]
    if command is None:
        command = [settings["python"], "-m", "grader.grading.sandbox.ipkernel", "-f",
                   connection_file, *kernel_args]
    return cmd + list(command)


def _refuse_workdir(workdir: str, settings: dict) -> str | None:
    """A reason not to hand ``workdir`` to the kernel's uid (it would chown a system folder)."""
    protected = settings["ro"] + [settings["runtime_dir"], "/usr", "/etc", "/root", "/home"]
    if workdir == "/" or any(p == workdir or p.startswith(workdir.rstrip("/") + "/")
                             for p in protected):
        return f"refusing to run a sandboxed kernel in {workdir}: it holds {protected}"
    if _inside(workdir, settings["ro"] + [settings["runtime_dir"]]):
        return f"refusing to run a sandboxed kernel in {workdir}: it is a read-only or runtime path"
    return None


def _chown_tree(root: str, uid: int, gid: int) -> None:
    """chown ``root`` and everything below to uid:gid, never following a symbolic link."""
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _links(root: str) -> set[tuple[str, str]]:
    """(path, target) of every symbolic link below ``root``."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                found.add((p, os.readlink(p)))
    return found


def _die_with_me() -> None:
    """In the bwrap child: be killed when this launcher dies (even by SIGKILL), and be the
    out-of-memory killer's first choice (RLIMIT_AS bounds one process, not a process tree);
    the kernel inherits the score and, unprivileged, cannot lower it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


def _kernel_pid(init_pid: int, deadline: float) -> int | None:
    """The host pid of the kernel: the child of bwrap's pid-1 reaper in the namespace."""
    while time.monotonic() < deadline:
        try:
            kids = Path(f"/proc/{init_pid}/task/{init_pid}/children").read_text().split()
        except OSError:
            return None
        if kids:
            return int(kids[0])
        time.sleep(0.005)
    return None


def describe_status(code: int) -> dict:
    """bwrap's exit status as the kernel's: 128+N (as bwrap and shells report it) is signal N."""
    if code < 0:
        code = 128 - code
    if code > 128 and code - 128 < signal.NSIG:
        try:
            return {"signal": signal.Signals(code - 128).name, "exit_code": None}
        except ValueError:
            pass
    return {"signal": None, "exit_code": code}


def _ipc_dir(connection_file: str, settings: dict) -> str | None:
    """The socket folder the connection file names (``<job>/ipc/k``), if it is below this
    slot's runtime folder, not a link, and this launcher's alone (its owner, writable by
    nobody else: the kernel must not be able to put anything there); else None."""
    try:
        ip = json.loads(Path(connection_file).read_text())["ip"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    folder = os.path.dirname(str(ip))
    runtime = settings["runtime_dir"].rstrip("/") + "/"
    if os.path.realpath(folder) != folder or not folder.startswith(runtime):
        return None
    st = os.lstat(folder) if os.path.lexists(folder) else None
    if (st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()
            or st.st_mode & 0o022):
        return None
    return folder


def listen(connection_file: str, ipc_dir: str, uid: int) -> dict[str, int]:
    """The kernel's five sockets, made in ``ipc_dir`` (root's) and listening before the kernel
    starts: ``{path: fd}``, the descriptors to hand to the kernel.

    ZeroMQ's ``ipc`` transport has the side that binds make the socket file, and the other
    side connect by its path. Were the kernel to bind, it would need to write the folder the
    grading process (root) connects in, and could replace a socket with a link to any other
    socket on the machine. Made here, by root, in a folder the kernel cannot write, the path
    names this socket until the job ends; the kernel only accepts on the descriptor (ZeroMQ's
    ``ZMQ_USE_FD``). Each socket is the slot uid's (the kernel connects to its own shell socket
    as ipykernel does), mode 0600. Raises ``ValueError`` for a connection file that does not
    name ``ipc`` sockets in ``ipc_dir``."""
    info = json.loads(Path(connection_file).read_text())
    if info.get("transport") != "ipc" or os.path.dirname(str(info.get("ip"))) != ipc_dir:
        raise ValueError(f"the connection file {connection_file} does not name ipc sockets "
                         f"in {ipc_dir}")
    ports = [info.get(k) for k in PORTS]
    if not all(type(p) is int and 0 < p < 2**16 for p in ports) or len(set(ports)) != len(ports):
        raise ValueError(f"the connection file {connection_file} names ports {ports}: five "
                         "different numbers are needed")
    fds: dict[str, int] = {}
    try:
        for port in ports:
            path = f"{info['ip']}-{port}"
            with contextlib.suppress(FileNotFoundError):   # an earlier kernel's, in root's folder
                os.unlink(path)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.bind(path)
                os.chown(path, uid, uid)
                os.chmod(path, 0o600)
                s.listen(64)
            except OSError:
                s.close()
                raise
            fds[path] = s.detach()
    except OSError:
        for fd in fds.values():
            os.close(fd)
        raise
    return fds


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "--settings":
        print("usage: python -m grader.grading.sandbox.kernel --settings FILE CONNECTION_FILE "
              "[KERNEL OPTION ...]",
              file=sys.stderr)
        return 2
    settings = json.loads(Path(argv[1]).read_text())
    workdir = os.path.realpath(os.getcwd())
    reason = _refuse_workdir(workdir, settings)
    if reason:
        print(reason, file=sys.stderr)
        return 2
    ipc_dir = _ipc_dir(argv[2], settings)
    if ipc_dir is None:
        print(f"refusing to start a sandboxed kernel: the connection file {argv[2]} does not "
              f"name a socket folder of this slot below {settings['runtime_dir']}", file=sys.stderr)
        return 2
    end_file = Path(ipc_dir).parent / "kernel_end.json"
    end_file.unlink(missing_ok=True)
    uid, gid = settings["uid"], settings["gid"]
    lim = settings["limits"]
    owner = os.stat(workdir)
    links_before = _links(workdir)
    _chown_tree(workdir, uid, gid)
    # the kernel reads its connection file (and its HMAC key) from the socket folder
    conn = Path(ipc_dir) / Path(argv[2]).name
    shutil.copyfile(argv[2], conn)
    os.chown(conn, uid, gid)
    os.chmod(conn, 0o400)
    try:
        sockets = listen(argv[2], ipc_dir, uid)
    except (OSError, ValueError) as e:
        print(f"refusing to start a sandboxed kernel: its sockets cannot be made ({e})",
              file=sys.stderr)
        conn.unlink(missing_ok=True)
        _chown_tree(workdir, owner.st_uid, owner.st_gid)
        return 2
    box = None
    if settings.get("cgroups", True):
        box = bounds.Box.create(f"course-grading-{uid}-{os.getpid()}",
                                 int(lim["memory_gb"] * 2**30), lim["processes"] + 16)
    oom_before = bounds.machine_oom_kills()

    def start() -> None:
        _die_with_me()
        if box is not None:
            box.add(os.getpid())

    r, w = os.pipe()
    disk = int(lim.get("kernel_disk_mb", 512) * 2**20)
    proc = subprocess.Popen(bwrap_command(settings, workdir, str(conn), argv[3:], w, ipc_dir,
                                          sockets=sockets, scratch_bytes=disk),
                            pass_fds=(w, *sockets.values()), start_new_session=True,
                            preexec_fn=start, stdin=subprocess.DEVNULL)
    os.close(w)
    for fd in sockets.values():   # the kernel's now; nothing here accepts on them
        os.close(fd)

    def stop() -> None:
        proc.kill()   # bwrap: the sandbox's init dies with it (--die-with-parent)
        if box is not None:
            box.kill()

    # one budget for every place the kernel can write: its folder, /tmp and /dev/shm
    watch = bounds.Watch(workdir, lim.get("kernel_files", 2000), disk, stop, box)
    watch.uid = uid
    watch.start()
    kernel: list[int] = []  # a pidfd: no signal can reach a recycled pid
    pending: list[int] = []  # signals that came before the kernel's pid was known

    def forward(signum, frame):
        if not kernel:
            pending.append(signum)
            return
        try:
            signal.pidfd_send_signal(kernel[0], signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    with os.fdopen(r) as status:
        first = status.readline()
        try:
            init = int(json.loads(first)["child-pid"])
            pid = _kernel_pid(init, time.monotonic() + 5)
            if pid:
                # its init has a child: the sandbox is set up, its /tmp and /dev/shm mounted
                watch.scratch = bounds.open_scratch(init, SCRATCH)
                kernel.append(os.pidfd_open(pid))
                for signum in pending:
                    forward(signum, None)
        except (ValueError, KeyError, ProcessLookupError):
            pass
        status.read()
    code = proc.wait()
    watch.done.set()
    watch.join(5)
    for fd in watch.scratch:
        os.close(fd)
    end = describe_status(code) | {"time": time.time(), "workdir": workdir,
                                   "cgroup": box is not None}
    end["cause"] = bounds.cause(end, watch, box, oom_before)
    if box is not None:
        box.remove()
    tmp = end_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(end))
    tmp.replace(end_file)
    # every process of the sandbox is gone with its pid namespace: give the folder back, and
    # drop links the kernel made (the grader writes the notebook there next, as root)
    for link, _ in _links(workdir) - links_before:  # new, or pointing elsewhere now
        os.unlink(link)
    _chown_tree(workdir, owner.st_uid, owner.st_gid)
    conn.unlink(missing_ok=True)
    for path in sockets:
        Path(path).unlink(missing_ok=True)
    return end["exit_code"] if end["exit_code"] is not None else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
