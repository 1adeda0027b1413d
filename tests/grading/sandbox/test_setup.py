"""The sandboxed grading kernel: what student code can read, write, reach and use.

Real kernels are started through nbclient with the environment and config that
:func:`grader.grading.sandbox.setup.prepare` returns (as nbgrader's autograde would), in the
working folder of a temporary course (``<course>/autograded/s/a``). One kernel is shared by
the read / write / network / limit checks; the CPU-time check ends its own kernel.
Without bubblewrap (or not as root) these tests fail with :func:`setup.check`'s message
when ``CI`` is set, and skip with it otherwise.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from grader.grading.sandbox import setup
from grader.grading.config import Limits, SandboxConfig

ROOT = Path(__file__).resolve().parents[3]
# a uid range of our own, and a slot from our pid: other runs on this machine (the grading
# pipeline's tests, another engineer's run) use other uids, so RLIMIT_NPROC counts are ours
CFG = SandboxConfig(uid_base=64000)
SLOT = os.getpid() % 1000
UID = CFG.uid_base + SLOT
SECRETS = {"COURSE_HUB_PASSWORD": "hunter2", "PGPASSWORD": "hunter2",
           "DATABASE_URL": "postgresql://grader:hunter2@localhost/course"}
LIMITS = Limits(memory_gb=4.0, cpu_seconds=120, processes=64, file_size_mb=1, open_files=256)


@pytest.fixture(scope="module")
def sandboxed():
    problem = setup.check(CFG)
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A course with another student's submission, the source and a gradebook beside ``s``."""
    root = tmp_path_factory.mktemp("course")
    secrets = {"source/a/x.ipynb": "SOLUTION", "submitted/other/a/x.ipynb": "OTHER STUDENT",
               "gradebook.db": "GRADEBOOK", "autograded/other/a/x.ipynb": "OTHER GRADED"}
    for rel, text in secrets.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "autograded/s/a").mkdir(parents=True)
    (root / "autograded/s/a/x.ipynb").write_text("MINE")
    return root


def _root_has_cap(bit: int) -> bool:
    status = Path("/proc/self/status").read_text()
    return bool(int(status.split("CapEff:")[1].split()[0], 16) >> bit & 1)


@contextlib.contextmanager
def _env(values: dict[str, str]):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Kernel:
    """One sandboxed kernel, started as nbclient starts it for nbgrader; runs cells one by one."""

    def __init__(self, workdir: Path, runtime: Path, limits: Limits, timeout: int = 60,
                 host_env: dict[str, str] | None = None):
        self.runtime = runtime
        env, config = setup.prepare(limits, CFG, SLOT, runtime)
        env = (host_env or {}) | env
        self.nb = nbformat.v4.new_notebook()
        self.client = NotebookClient(self.nb, config=config, kernel_name="python3",
                                     timeout=timeout, allow_errors=True, interrupt_on_timeout=True,
                                     resources={"metadata": {"path": str(workdir)}})
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_env(env))
        self._stack.enter_context(self.client.setup_kernel())

    def run(self, code: str, timeout: int | None = None) -> tuple[str, str]:
        """(stdout, "ExceptionName: message" or "") of one cell."""
        cell = nbformat.v4.new_code_cell(code)
        self.nb.cells.append(cell)
        if timeout is not None:
            self.client.timeout, old = timeout, self.client.timeout
        try:
            self.client.execute_cell(cell, len(self.nb.cells) - 1)
        finally:
            if timeout is not None:
                self.client.timeout = old
        out = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        err = next((f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"), "")
        return out, err

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="module")
def kernel(sandboxed, course, tmp_path_factory):
    k = Kernel(course / "autograded/s/a", tmp_path_factory.mktemp("rt"), LIMITS,
               host_env=SECRETS | {"COURSE_FRAMEWORK": "paddle", "OMP_NUM_THREADS": "8"})
    yield k
    k.close()


TRY_READ = """
import json, os
def attempt(p):
    try:
        with open(p) as f:
            return "READ " + f.read(20)
    except Exception as e:
        return type(e).__name__
print(json.dumps({p: attempt(p) for p in %r}))
"""


def test_the_kernel_runs_as_the_slot_uid_without_groups_or_capabilities(kernel):
    out, err = kernel.run("import os\nprint(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())\n"
                          "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0])")
    assert not err
    ids, caps = out.strip().splitlines()
    assert ids == f"{UID} {UID} {UID} []"
    assert caps.split()[1] == "0000000000000000"


def test_it_reads_its_own_folder_but_not_the_course_solutions_or_gradebook(kernel, course):
    secret = ["source/a/x.ipynb", "submitted/other/a/x.ipynb", "gradebook.db",
              "autograded/other/a/x.ipynb"]
    paths = [str(course / p) for p in secret] + [
        "/root/.profile", str(ROOT / "tests/grading/sandbox/test_setup.py"),
        str(ROOT / "exercises/nbgrader_config.py"), str(ROOT / "exercises/AUTHORING.md"),
        str(ROOT / "pyproject.toml")]
    assert all(Path(p).is_file() for p in paths)  # they are there, for the grader
    out, err = kernel.run(TRY_READ % (paths + ["x.ipynb"]))
    assert not err
    seen = json.loads(out)
    assert seen.pop("x.ipynb") == "READ MINE"
    assert {p: r for p, r in seen.items() if r.startswith("READ")} == {}
    # nothing but the Python install in /root, nothing but .venv and grader/ of the repo
    out, err = kernel.run(f"import os\nprint(sorted(os.listdir('/root')), sorted(os.listdir({str(ROOT)!r})))")
    assert out.strip() == f"['.pyenv'] ['.venv', 'grader']", out


def test_it_writes_only_its_folder_and_a_private_tmp(kernel, course):
    tag = f"sbx-{os.getpid()}-{time.monotonic_ns()}"
    targets = [str(course / tag), str(course / "submitted" / tag), str(ROOT / tag),
               str(ROOT / "grader" / tag), "/usr/" + tag, "/etc/" + tag, "/root/" + tag,
               "/tmp/" + tag, "/dev/shm/" + tag, tag]
    out, err = kernel.run(f"""
import json, os
res = {{}}
for p in {targets!r}:
    try:
        with open(p, "w") as f:
            f.write("x")
        res[p] = "WROTE"
    except Exception as e:
        res[p] = type(e).__name__
print(json.dumps(res))""")
    leaked = [p for p in targets[:-1] if Path(p).exists()]
    for p in leaked:  # a broken sandbox must not leave files in /usr, the repo...
        os.unlink(p)
    assert not err and leaked == []
    res = json.loads(out)
    assert res.pop(tag) == "WROTE" and (course / "autograded/s/a" / tag).is_file()
    assert res.pop("/tmp/" + tag) == "WROTE"  # ... in its private /tmp and /dev/shm
    assert res.pop("/dev/shm/" + tag) == "WROTE"
    assert {p: r for p, r in res.items() if r == "WROTE"} == {}
    out, err = kernel.run("import os\nprint(oct(os.stat('/tmp').st_mode), oct(os.stat('/dev/shm').st_mode))")
    assert out.split() == ["0o41777", "0o41777"]  # sticky, like a host's /tmp
    # while the kernel runs, its folder is the slot uid's (so it can write there)
    assert (course / "autograded/s/a").stat().st_uid == UID


def test_it_sees_only_the_environment_variables_it_needs(kernel):
    out, err = kernel.run("import os, json\nprint(json.dumps(dict(os.environ)))")
    env = json.loads(out)
    assert not set(SECRETS) & set(env) and "hunter2" not in out
    assert env["COURSE_FRAMEWORK"] == "paddle" and env["HOME"] == "/tmp"


def test_it_has_no_network_not_even_the_hosts_loopback(kernel):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # the host can
        out, err = kernel.run(f"""
import socket
def attempt(f):
    try:
        f()
        return "OK"
    except Exception as e:
        return type(e).__name__
print(attempt(lambda: socket.create_connection(("127.0.0.1", {port}), timeout=3).close()))
print(attempt(lambda: socket.create_connection(("1.1.1.1", 53), timeout=3).close()))
print(attempt(lambda: socket.getaddrinfo("pypi.org", 443)))""", timeout=30)
    assert not err
    assert out.split() == ["ConnectionRefusedError", "OSError", "gaierror"], out


def test_a_fork_bomb_and_a_thread_flood_hit_the_process_limit_and_the_kernel_survives(kernel):
    out, err = kernel.run("""
import os, threading, time
pids, forked = [], ""
try:
    for _ in range(10_000):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        pids.append(pid)
except OSError as e:
    forked = f"{type(e).__name__}: {e}"
for p in pids:
    os.kill(p, 9)
    os.waitpid(p, 0)
stop, threads, started = threading.Event(), [], ""
try:
    for _ in range(10_000):
        t = threading.Thread(target=stop.wait)
        t.start()
        threads.append(t)
except RuntimeError as e:
    started = f"{type(e).__name__}: {e}"
stop.set()
for t in threads:
    t.join()
print(len(pids), forked)
print(len(threads), started)""", timeout=120)
    assert not err
    forks, threads = out.splitlines()
    assert int(forks.split()[0]) < LIMITS.processes
    assert "Resource temporarily unavailable" in forks
    assert int(threads.split()[0]) < LIMITS.processes and "can't start new thread" in threads
    for line in (forks, threads):
        assert "process limit (64 processes" in setup.describe_limit_hit(line, LIMITS)
    assert kernel.run("print('still here')") == ("still here\n", "")


def test_a_huge_allocation_raises_memory_error_and_the_next_cell_runs(kernel):
    # more than any machine can map (1 PB): refused at once, whatever bounds memory (memory
    # used past memory_gb is the control group's: the kernel is stopped, test_bounds.py)
    out, err = kernel.run("x = bytearray(2**50)")
    assert err.startswith("MemoryError")
    assert setup.describe_limit_hit(err, LIMITS) == "the memory limit (4 GB) was reached"
    assert kernel.run("print(2 + 2)") == ("4\n", "")


def test_a_file_over_the_size_limit_raises_file_too_large(kernel):
    out, err = kernel.run("open('big.bin', 'wb').write(b'0' * 2 * 2**20)")
    assert err.startswith("OSError: [Errno 27] File too large"), err
    assert "file size limit (1 MB" in setup.describe_limit_hit(err, LIMITS)


def test_too_many_open_files_raise_oserror_24(kernel):
    out, err = kernel.run("fs = [open('x.ipynb') for _ in range(1000)]")
    assert err.startswith("OSError: [Errno 24] Too many open files"), err
    assert "open files limit (256" in setup.describe_limit_hit(err, LIMITS)
    assert kernel.run("print(len(open('x.ipynb').read()))") == ("4\n", "")  # closed again


def test_an_endless_loop_is_interrupted_by_the_cell_timeout_and_the_next_cell_runs(kernel):
    out, err = kernel.run("while True:\n    pass", timeout=3)
    assert err.startswith("KeyboardInterrupt")
    assert "time limit of a cell (60 s)" in setup.describe_limit_hit(err, LIMITS)
    assert kernel.run("print('next')") == ("next\n", "")


def test_numpy_torch_and_the_checks_import_inside(kernel):
    out, err = kernel.run("import numpy, torch, grader.checks\n"
                          "print(float(torch.ones(3).sum()), numpy.__name__, grader.checks.__name__)")
    assert (out, err) == ("3.0 numpy grader.checks\n", "")


def test_a_module_beside_the_notebook_imports_and_the_debugger_is_left_out(kernel):
    # the kernel's entry point (sandbox/ipkernel.py) takes the folder off sys.path while
    # ipykernel loads; IPython must have put it back, as under ipykernel_launcher
    out, err = kernel.run("import sys\nopen('my_helper_mod.py', 'w').write('VALUE = 42\\n')\n"
                          "import my_helper_mod\n"
                          "print(my_helper_mod.VALUE, '' in sys.path, sys.modules.get('debugpy', 0))")
    assert (out, err) == ("42 True None\n", "")
    out, err = kernel.run("import debugpy")
    assert err.startswith("ModuleNotFoundError") or err.startswith("ImportError"), err
    kernel.run("import os\nos.remove('my_helper_mod.py')")


def test_blas_and_openmp_get_one_thread_whatever_the_host_says(kernel):
    # the host's OMP_NUM_THREADS=8 (Kernel's host_env) does not reach it; kernel_threads does
    out, err = kernel.run("import os\nprint(*(os.environ[v] for v in "
                          "('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS')))")
    assert (out, err) == ("1 1 1\n", "")
    # and numpy's OpenBLAS starts no thread of its own (it starts cores - 1 without the variable)
    out, err = kernel.run(
        "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'import os; "
        "n = len(os.listdir(\"/proc/self/task\")); import numpy; "
        "print(len(os.listdir(\"/proc/self/task\")) - n)'], capture_output=True, text=True).stdout)")
    assert (out.strip(), err) == ("0", "")


def test_the_cpu_time_limit_ends_the_kernel_with_sigxcpu_and_the_folder_is_handed_back(sandboxed, tmp_path):
    work = tmp_path / "autograded/s/a"
    work.mkdir(parents=True)
    k = Kernel(work, tmp_path / "rt", Limits(cpu_seconds=3))
    try:
        assert k.run("import os\nos.symlink('/etc/shadow', 'x.ipynb')") == ("", "")
        with pytest.raises(DeadKernelError):
            k.run("while True:\n    pass", timeout=60)
    finally:
        k.close()
    for _ in range(100):  # the launcher writes it as soon as the kernel has ended
        if setup.kernel_end(tmp_path / "rt"):
            break
        time.sleep(0.05)
    assert setup.kernel_end(tmp_path / "rt") == "SIGXCPU"
    assert setup.describe_limit_hit("SIGXCPU", Limits(cpu_seconds=3)).startswith(
        "the CPU time limit (3 s of CPU time) was reached")
    # a link the kernel made is gone (the grader writes there next, as root), the folder is root's
    assert not (work / "x.ipynb").is_symlink()
    assert work.stat().st_uid == 0


@pytest.mark.parametrize("code", [0, 3])
def test_a_kernel_that_exits_says_its_exit_code(sandboxed, tmp_path, code):
    # the kernel exits by itself: a shutdown through the client is no fixed end (nbgrader's
    # is a SIGTERM, and CPython can abort with SIGABRT at shutdown when ipykernel's daemon
    # threads still hold stdout's lock), so the exit code is checked where it is certain
    work = tmp_path / "w"
    work.mkdir()
    k = Kernel(work, tmp_path / "rt", LIMITS)
    try:
        k.run("pass")
        with pytest.raises(DeadKernelError):
            k.run(f"import os, sys\nsys.stdout.flush()\nos._exit({code})", timeout=60)
    finally:
        k.close()
    for _ in range(100):
        if setup.kernel_end(tmp_path / "rt"):
            break
        time.sleep(0.05)
    assert setup.kernel_end(tmp_path / "rt") == f"exit {code}"
    assert setup.describe_limit_hit(f"exit {code}", LIMITS) is None


def test_sigint_and_sigterm_to_the_launcher_reach_the_kernel(sandboxed, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    k = Kernel(work, tmp_path / "rt", LIMITS)
    try:
        # the kernel is the out-of-memory killer's first choice; it cannot lower that where
        # the launcher's root has CAP_SYS_RESOURCE (some containers' root does not)
        out, err = k.run("print(open('/proc/self/oom_score_adj').read().strip())\n"
                         "with open('/proc/self/oom_score_adj', 'w') as f:\n    f.write('0')")
        assert out == "1000\n"
        assert err.startswith("PermissionError") == _root_has_cap(24), err  # CAP_SYS_RESOURCE
        launcher = k.client.km.provisioner.process.pid
        threading.Timer(1.0, os.kill, (launcher, signal.SIGINT)).start()
        t0 = time.monotonic()
        out, err = k.run("import time\ntime.sleep(30)")
        assert err.startswith("KeyboardInterrupt") and time.monotonic() - t0 < 20
        assert setup.kernel_end(tmp_path / "rt") is None  # still running
        os.kill(launcher, signal.SIGTERM)
        for _ in range(100):
            if setup.kernel_end(tmp_path / "rt"):
                break
            time.sleep(0.05)
    finally:
        k.close()
    assert setup.kernel_end(tmp_path / "rt") == "SIGTERM"


def test_the_launcher_refuses_a_folder_that_holds_what_it_protects(sandboxed, tmp_path):
    env, config = setup.prepare(LIMITS, CFG, SLOT, tmp_path / "rt")
    assert dict(config.KernelManager) == {"transport": "ipc", "ip": str(tmp_path / "rt/ipc/k")}
    conn = tmp_path / "conn.json"
    conn.write_text("{}")
    before = tmp_path.stat().st_uid
    p = subprocess.run([sys.executable, "-m", "grader.grading.sandbox.kernel", "--settings",
                        str(tmp_path / "rt/sandbox.json"), str(conn)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "refusing to run a sandboxed kernel" in p.stderr
    assert tmp_path.stat().st_uid == before


def test_the_package_the_sandbox_reads_is_compiled_before_kernels_start(sandboxed, tmp_path):
    # kernels read grader/ read-only and write no bytecode: without it each compiles the
    # checks it imports
    import importlib.util

    import grader.checks.support as support

    pyc = Path(importlib.util.cache_from_source(support.__file__))
    pyc.unlink(missing_ok=True)
    setup.prepare(LIMITS, CFG, SLOT, tmp_path / "rt")
    assert pyc.is_file() and pyc.stat().st_size > 0


def test_mode_none_writes_a_plain_kernel_and_no_config(tmp_path):
    env, config = setup.prepare(LIMITS, SandboxConfig(mode="none"), 0, tmp_path)
    spec = json.loads((Path(env["JUPYTER_PATH"]) / "kernels/python3/kernel.json").read_text())
    assert spec["argv"][1:3] == ["-m", "ipykernel_launcher"] and config == {}


def test_check_says_what_to_do_without_bubblewrap_or_root(monkeypatch):
    import shutil

    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda t: None if t == "bwrap" else which(t))
    msg = setup.check(SandboxConfig())
    assert "bwrap is not installed" in msg and "apt-get install bubblewrap" in msg
    assert '[sandbox] mode = "none"' in msg
    assert setup.check(SandboxConfig(mode="none")) is None
    monkeypatch.setattr(shutil, "which", which)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "must run as root" in setup.check(SandboxConfig())


@pytest.mark.parametrize("what, names", [
    ("SIGXCPU", "CPU time limit (600 s"), ("MemoryError", "memory limit (4 GB)"),
    ("OSError: [Errno 27] File too large", "file size limit (64 MB"),
    ("BlockingIOError: [Errno 11] Resource temporarily unavailable", "process limit (512"),
    ("RuntimeError: can't start new thread", "process limit (512"),
    ("OSError: [Errno 24] Too many open files", "open files limit (1024"),
    ("SIGKILL", "not by the out-of-memory killer"), ("memory-limit", "GB for the notebook's processes"),
    ("files-limit", "files and folders"),
])
def test_a_limit_hit_is_named_in_a_sentence(what, names):
    assert names in setup.describe_limit_hit(what, Limits())


def test_an_ordinary_error_names_no_limit():
    assert setup.describe_limit_hit("ZeroDivisionError: division by zero", Limits()) is None


# -- one folder and one control group per submission; what the sandbox stops (issue 15) ------

# how a kernel ends after a clean close (setup.kernel_end's docstring): by itself, by
# jupyter_client's SIGTERM, or now and then CPython's SIGABRT at shutdown
AFTER_A_CLOSE = ("exit 0", "SIGTERM", "SIGABRT")


def _wait_end(folder: Path) -> str | None:
    for _ in range(200):
        if setup.kernel_end(folder):
            break
        time.sleep(0.05)
    return setup.kernel_end(folder)


class JobKernel(Kernel):
    """A kernel started as a grading worker starts one for a submission (setup.job)."""

    def __init__(self, workdir: Path, runtime: Path, job_env: dict, job_config, limits: Limits):
        self.runtime = runtime
        env, config = setup.prepare(limits, CFG, SLOT, runtime)
        config.merge(job_config)
        self.nb = nbformat.v4.new_notebook()
        self.client = NotebookClient(self.nb, config=config, kernel_name="python3", timeout=60,
                                     allow_errors=True, interrupt_on_timeout=True,
                                     resources={"metadata": {"path": str(workdir)}})
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_env(env | job_env))
        try:
            self._stack.enter_context(self.client.setup_kernel())
        except BaseException:
            self._stack.close()   # a kernel that did not start leaves no environment set
            raise


LIST_SOCKETS = ("import os, ipykernel\nd = os.path.dirname(ipykernel.get_connection_file())\n"
                "try:\n    open(os.path.join(d, 'note-%d'), 'w').write('x')\n"
                "except OSError as e:\n    print(type(e).__name__)\nprint(d, sorted(os.listdir(d)))")


def test_each_submission_gets_its_own_socket_folder_removed_afterwards(sandboxed, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    seen = []
    for i in range(2):
        with setup.job(tmp_path / "rt", CFG, SLOT) as (folder, env, config):
            k = JobKernel(work, tmp_path / "rt", env, config, LIMITS)
            try:
                out, err = k.run(LIST_SOCKETS % i)
            finally:
                k.close()
            # ended: by itself, or terminated by jupyter_client when the shutdown it asked
            # for takes longer than its wait (as on a loaded machine), or CPython's abort at
            # shutdown (setup.kernel_end: seen in a fresh-clone CI run here)
            assert not err and _wait_end(folder) in AFTER_A_CLOSE
            refused, line = out.splitlines()
            where, listing = line.split(" ", 1)
            assert refused == "OSError"    # read-only: root's, its sockets made by the launcher
            seen.append((folder, where, listing))
        assert not folder.exists()
    (f1, d1, l1), (f2, d2, l2) = seen
    assert d1 == str(f1 / "ipc") and d2 == str(f2 / "ipc") and d1 != d2
    assert "note" not in l1 + l2
    assert l2.count(".json") == 1                   # its own connection file, nobody else's
    assert l2.count("'k-") == 5                     # its own five sockets


def test_a_kernel_runs_in_a_control_group_of_its_own_with_the_limits(sandboxed, tmp_path):
    from grader.grading.sandbox.bounds import Box

    probe = Box.create(f"probe-{os.getpid()}", 2**30, 16)
    if probe is None:
        pytest.skip("this machine gives the grader no control group: rlimits only")
    probe.remove()
    work = tmp_path / "w"
    work.mkdir()
    k = Kernel(work, tmp_path / "rt", LIMITS)
    try:
        out, err = k.run("import os\nprint(os.getpid())")
        launcher = k.client.km.provisioner.process.pid
        from grader.grading.sandbox.procs import descendants
        groups = {p: Path(f"/proc/{p}/cgroup").read_text() for p in descendants(launcher)}
        name = f"course-grading-{UID}-{launcher}"
        assert groups and all(name in g for g in groups.values()), groups
        mem = next(Path(d) for d in Path("/sys/fs/cgroup").rglob(name) if "memory" in str(d)) \
            if Path("/sys/fs/cgroup/memory").is_dir() else None
        if mem is not None:
            assert int((mem / "memory.limit_in_bytes").read_text()) == int(LIMITS.memory_gb * 2**30)
    finally:
        k.close()
    assert _wait_end(tmp_path / "rt") in AFTER_A_CLOSE   # how nbclient stopped it
    assert not any(Path("/sys/fs/cgroup").rglob(name))      # removed with the kernel


@pytest.mark.parametrize("code, limits", [   # until the watch on the folder stops them
    ("import itertools\nfor i in itertools.count():\n    open(f'f{i}', 'w').close()",
     Limits(kernel_files=200)),
    ("import itertools\nfor i in itertools.count():\n    open(f'b{i}', 'wb').write(b'0' * 2**20)",
     Limits(kernel_disk_mb=10)),
])
def test_a_kernel_that_writes_too_much_into_its_folder_is_stopped(sandboxed, tmp_path, code, limits):
    work = tmp_path / "w"
    work.mkdir()
    k = Kernel(work, tmp_path / "rt", limits)
    try:
        with pytest.raises(DeadKernelError):
            k.run(code, timeout=60)
    finally:
        k.close()
    assert _wait_end(tmp_path / "rt") == "files-limit"
    assert "limit on what a notebook may write" in setup.describe_limit_hit("files-limit", limits)


@pytest.mark.parametrize("signal_name, over, box_hit, oom_delta, cause", [
    ("SIGKILL", None, True, 1, "memory"),          # its own control group's limit
    ("SIGKILL", None, False, 1, "machine-oom"),    # killed in its group, limit not reached
    ("SIGKILL", None, None, 1, None),              # no control group: no evidence, its crash
    ("SIGKILL", None, False, 0, None),             # killed by someone: the student's crash
    ("SIGKILL", "files", None, 0, "files"),
    ("SIGXCPU", None, False, 1, None),
])
def test_the_launcher_says_why_the_sandbox_ended_a_kernel(monkeypatch, signal_name, over, box_hit,
                                                          oom_delta, cause):
    """``oom_delta``: out-of-memory kills counted in the kernel's own group (the machine-wide
    count is not read: tests/grading/sandbox/test_bounds.py)."""
    from grader.grading.sandbox import bounds

    class Watch:
        pass

    class FakeBox:
        def hit_memory_limit(self):
            return box_hit

        def oom_killed(self):
            return oom_delta

    watch = Watch()
    watch.over = over
    end = {"signal": signal_name, "exit_code": None}
    assert bounds.cause(end, watch, None if box_hit is None else FakeBox(), 10) == cause
    assert setup.kernel_end.__doc__ and setup.MACHINE_OOM == "machine-oom"


class _HeldBox:
    """A control group whose unreclaimable memory is read from a list, one value a check."""

    def __init__(self, held: list[float]) -> None:
        self.held = held

    def unreclaimable(self):
        return int(self.held.pop(0) * 2**30), 2**30


@pytest.mark.parametrize("held, ends_at", [
    ([0.5, 0.9, 0.94, 0.5], None),           # under 95 % of the limit: never
    ([0.96, 0.5, 0.96, 0.5], None),          # a moment at the limit is not out of memory
    ([0.5, 0.96, 0.99], 3),                  # two checks in a row: ended, as the limit's
    ([0.97, 0.97], 2),
])
def test_the_watch_ends_a_kernel_whose_group_stays_full_of_memory_it_cannot_give_back(held, ends_at):
    from grader.grading.sandbox.bounds import FULL_CHECKS, Watch

    assert FULL_CHECKS == 2
    w = Watch.__new__(Watch)     # out_of_memory reads only the box and its own count
    w.box, w.full = _HeldBox(list(held)), 0
    said = [w.out_of_memory() for _ in held]
    assert (said.index(True) + 1 if True in said else None) == ends_at, said
    w.box = None                 # no control group: nothing to read, never out of memory
    assert not w.out_of_memory()


def test_a_groups_unreclaimable_memory_counts_its_processes_memory_not_its_page_cache(tmp_path):
    """What the watch reads (bounds.Box.unreclaimable), on a real control group: 200 MB a
    process holds count; 300 MB of a file it wrote and read back (page cache) do not."""
    import subprocess
    import sys

    from grader.grading.sandbox.bounds import Box

    box = Box.create(f"probe-held-{os.getpid()}", 2**30, 16)
    if box is None:
        pytest.skip("this machine gives the grader no control group: rlimits only")
    big = tmp_path / "big.bin"
    code = ("import sys\n"
            "with open(sys.argv[1], 'wb') as f:\n"
            "    for _ in range(300): f.write(b'1' * 2**20)\n"
            "open(sys.argv[1], 'rb').read()\n"
            "held = bytearray(200 * 2**20)\n"
            "for i in range(0, len(held), 4096): held[i] = 1\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n")
    try:
        p = subprocess.Popen([sys.executable, "-c", code, str(big)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             preexec_fn=lambda: box.add(os.getpid()))
        try:
            assert p.stdout.readline().strip() == "ready"
            held, limit = box.unreclaimable()
            assert limit == 2**30
            assert 200 * 2**20 <= held < 300 * 2**20, held / 2**20
        finally:
            p.stdin.close()
            p.wait(timeout=30)
    finally:
        box.remove()


def test_a_kernel_that_keeps_its_group_full_is_ended_with_the_memory_limit(sandboxed, tmp_path):
    """Memory up to 97 % of the group's limit, then a wait: the group's own out-of-memory
    killer never acts (the limit is not reached), the launcher's watch does, within seconds,
    and names the memory limit. (Anonymous memory: memory-backed files, /tmp and /dev/shm,
    hold at most ``kernel_disk_mb``, the disk budget, which ends a kernel first.)"""
    from grader.grading.sandbox.bounds import Box

    probe = Box.create(f"probe-{os.getpid()}", 2**30, 16)
    if probe is None:
        pytest.skip("this machine gives the grader no control group: rlimits only")
    probe.remove()
    limits = Limits(memory_gb=1.5, cpu_seconds=120, processes=64, file_size_mb=1024,
                    open_files=256)
    work = tmp_path / "w"
    work.mkdir()
    k = Kernel(work, tmp_path / "rt", limits)
    # memory written up to 97 % of the limit, less what the kernel itself holds
    fill = ("import time\n"
            "anon = next(int(l.split()[1]) * 1024 for l in open('/proc/self/status')\n"
            "            if l.startswith('RssAnon:'))\n"
            f"left = int(0.97 * {int(limits.memory_gb * 2**30)}) - anon - 2**24\n"
            "held = []\n"
            "while left > 0:\n"
            "    held.append(b'1' * min(left, 2**24))\n"
            "    left -= 2**24\n"
            "time.sleep(40)\n"
            "print('not ended')")
    t0 = time.monotonic()
    try:
        with pytest.raises(DeadKernelError):
            k.run(fill, timeout=60)
    finally:
        k.close()
    assert time.monotonic() - t0 < 35, "the kernel outlived its full group"
    assert _wait_end(tmp_path / "rt") == "memory-limit"
