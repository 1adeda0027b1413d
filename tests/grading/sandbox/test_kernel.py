"""The launcher's side of what a kernel can write: its sockets and its disk budget (issue 32).

- **No path the kernel can write is opened by root.** The kernel's socket folder is root's and
  read-only in the sandbox; the launcher makes the five sockets there, listening, and hands
  them to the kernel as descriptors (``kernel.listen``, ``ipkernel.use_given_sockets``). A
  kernel that tries to put a link to another socket where its own is cannot, and a fresh
  client (what the grading process does when it connects again) reaches the kernel, not the
  link's target. A socket folder the kernel could write is refused: that job fails, the next
  one is graded.
- **One disk budget for every place the kernel can write**: its folder, ``/tmp`` and
  ``/dev/shm`` together, watched the same way; a kernel that fills ``/tmp`` past
  ``kernel_disk_mb`` is stopped with the disk limit named.

The sandboxed tests start real kernels (bubblewrap, root), as ``test_setup.py`` does.
"""
from __future__ import annotations

import json
import os
import socket
import stat
from dataclasses import asdict
from pathlib import Path

import pytest
from nbclient.exceptions import DeadKernelError

from grader.grading.config import Limits
from grader.grading.sandbox import bounds, ipkernel, kernel, setup
from tests.grading.sandbox.test_setup import (CFG, LIMITS, SLOT, UID, JobKernel, Kernel,
                                              _wait_end, sandboxed)  # noqa: F401 (a fixture)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the launcher runs as root")


def _connection_file(folder: Path, ipc: Path, ports=(1, 2, 3, 4, 5), transport="ipc") -> Path:
    names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    info = dict(zip(names, ports), ip=str(ipc / "k"), transport=transport, key="k",
                signature_scheme="hmac-sha256")
    f = folder / "kernel-x.json"
    f.write_text(json.dumps(info))
    return f


@needs_root
def test_the_sockets_are_made_by_root_in_roots_folder_before_the_kernel_starts(tmp_path):
    ipc = tmp_path / "ipc"
    ipc.mkdir(mode=0o755)
    os.chmod(ipc, 0o755)
    decoy = tmp_path / "decoy"
    (ipc / "k-1").symlink_to(decoy)   # a stale entry is replaced, never followed
    fds = kernel.listen(str(_connection_file(tmp_path, ipc)), str(ipc), UID)
    try:
        assert sorted(fds) == [f"{ipc}/k-{p}" for p in range(1, 6)]
        for path, fd in fds.items():
            st = os.lstat(path)
            assert stat.S_ISSOCK(st.st_mode) and st.st_uid == UID and stat.S_IMODE(st.st_mode) == 0o600
            with socket.socket(socket.AF_UNIX) as c:    # listening on the descriptor handed over
                c.connect(path)
                peer = socket.socket(fileno=os.dup(fd))
                peer.settimeout(5)
                conn, _ = peer.accept()
                conn.close()
                peer.close()
        assert not decoy.exists()
    finally:
        for fd in fds.values():
            os.close(fd)


@needs_root
def test_a_socket_folder_the_kernel_could_write_or_a_stray_connection_file_is_refused(tmp_path):
    settings = {"uid": UID, "runtime_dir": str(tmp_path)}
    ipc = tmp_path / "ipc"
    ipc.mkdir()
    os.chmod(ipc, 0o755)
    conn = _connection_file(tmp_path, ipc)
    assert kernel._ipc_dir(str(conn), settings) == str(ipc)
    os.chown(ipc, UID, UID)                 # the old layout: the kernel made its sockets here
    assert kernel._ipc_dir(str(conn), settings) is None
    os.chown(ipc, 0, 0)
    os.chmod(ipc, 0o777)                    # anyone could put a link there
    assert kernel._ipc_dir(str(conn), settings) is None
    os.chmod(ipc, 0o755)
    with pytest.raises(ValueError, match="ipc sockets"):
        kernel.listen(str(_connection_file(tmp_path, ipc, transport="tcp")), str(ipc), UID)
    with pytest.raises(ValueError, match="five different"):
        kernel.listen(str(_connection_file(tmp_path, ipc, ports=(1, 1, 2, 3, 4))), str(ipc), UID)
    with pytest.raises(ValueError, match="ipc sockets"):
        kernel.listen(str(_connection_file(tmp_path, tmp_path / "elsewhere")), str(ipc), UID)


def test_zeromq_binds_the_given_descriptor_once_and_then_binds_as_usual(tmp_path):
    import zmq

    path = str(tmp_path / "k-1")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(8)
    environ = {ipkernel.SOCKETS_ENV: json.dumps({path: listener.fileno()})}
    original = zmq.Socket.bind
    ctx = zmq.Context()
    try:
        assert ipkernel.use_given_sockets(environ) == {f"ipc://{path}": listener.fileno()}
        assert ipkernel.SOCKETS_ENV not in environ          # the student's code does not see it
        server = ctx.socket(zmq.ROUTER)
        server.bind(f"ipc://{path}")
        assert server.getsockopt(zmq.USE_FD) == listener.fileno()
        assert zmq.Socket.bind is original                 # all used: ZeroMQ's own again
        client = ctx.socket(zmq.DEALER)
        client.connect(f"ipc://{path}")
        client.send(b"ping")
        assert server.poll(5000) and server.recv_multipart()[-1] == b"ping"
        client.close(linger=0)
        server.close(linger=0)
    finally:
        zmq.Socket.bind = original
        ctx.term()
    assert kernel.SOCKETS_ENV == ipkernel.SOCKETS_ENV


SWAP = """
import json, os, ipykernel
d = os.path.dirname(ipykernel.get_connection_file())
res = {}
for name in sorted(os.listdir(d)):
    p = os.path.join(d, name)
    if not name.startswith('k-'):
        continue
    for what, act in (('unlink', lambda: os.unlink(p)),
                      ('rename', lambda: os.rename(p, p + '.old')),
                      ('link', lambda: os.symlink(%(decoy)r, p + '.new')),
                      ('chmod', lambda: os.chmod(p, 0o777))):
        try:
            act()
            res[name + ' ' + what] = 'DONE'
        except OSError as e:
            res[name + ' ' + what] = type(e).__name__
    try:   # the kernel's own replacement, as a link beside it renamed over it
        os.replace(p + '.new', p)
        res[name + ' replace'] = 'DONE'
    except OSError as e:
        res[name + ' replace'] = type(e).__name__
print(json.dumps(res))
"""


@pytest.mark.slow   # a kernel and a second client: 8 s on 2 busy cores
def test_a_kernel_cannot_put_a_link_where_its_socket_is_and_a_new_client_reaches_it(sandboxed, tmp_path):
    # a listener outside the sandbox, open to anyone: the socket the attack points to
    (tmp_path / "d").mkdir(mode=0o755)
    decoy = socket.socket(socket.AF_UNIX)
    decoy.bind(str(tmp_path / "d" / "decoy"))
    os.chmod(tmp_path / "d" / "decoy", 0o777)
    decoy.listen(8)
    decoy.setblocking(False)
    work = tmp_path / "w"
    work.mkdir()
    with setup.job(tmp_path / "rt", CFG, SLOT) as (folder, env, config):
        ipc = folder / "ipc"
        assert ipc.stat().st_uid == 0 and stat.S_IMODE(ipc.stat().st_mode) == 0o755
        k = JobKernel(work, tmp_path / "rt", env, config, LIMITS)
        try:
            out, err = k.run(SWAP % {"decoy": str(tmp_path / "d" / "decoy")})
            assert not err, err
            tried = json.loads(out)
            assert len(tried) == 25 and not [w for w, r in tried.items() if r == "DONE"], tried
            for p in range(1, 6):
                assert stat.S_ISSOCK(os.lstat(ipc / f"k-{p}").st_mode)
            # the grading process connecting again (a new client, reconnects) reaches the kernel
            from jupyter_client import BlockingKernelClient

            kc = BlockingKernelClient()
            kc.load_connection_info(k.client.km.get_connection_info())
            kc.start_channels()
            try:
                kc.wait_for_ready(timeout=30)
                assert kc.execute_interactive("print(6 * 7)", timeout=30)["content"]["status"] == "ok"
            finally:
                kc.stop_channels()
        finally:
            k.close()
    with pytest.raises(BlockingIOError):   # nothing ever connected to the link's target
        decoy.accept()
    decoy.close()


@pytest.mark.slow   # two kernel starts, one refused: 6 s on 2 busy cores
def test_a_job_whose_socket_folder_the_kernel_could_write_fails_alone(sandboxed, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    with setup.job(tmp_path / "rt", CFG, SLOT) as (folder, env, config):
        os.chown(folder / "ipc", UID, UID)  # what the kernel could replace sockets in
        with pytest.raises(RuntimeError, match="died"):
            JobKernel(work, tmp_path / "rt", env, config, LIMITS).close()
        assert setup.kernel_end(folder) is None   # refused before it started
    assert work.stat().st_uid == 0
    with setup.job(tmp_path / "rt", CFG, SLOT) as (folder, env, config):
        k = JobKernel(work, tmp_path / "rt", env, config, LIMITS)
        try:
            assert k.run("print(6 * 7)") == ("42\n", "")
        finally:
            k.close()


# -- one disk budget for the folder, /tmp and /dev/shm ------------------------------------

def test_the_budget_counts_memory_backed_folders_by_their_file_systems_count(tmp_path):
    fds = bounds.open_scratch(os.getpid(), ("/dev/shm", "/nonexistent"))
    assert len(fds) == 1   # what cannot be opened is left out
    try:
        before = bounds.scratch_used(fds)
        name = f"/dev/shm/budget-{os.getpid()}"
        with open(name, "wb") as f:
            f.write(b"1" * 2**21)
            os.unlink(name)          # deleted, still open: still holds memory, still counted
            f.flush()
            assert bounds.scratch_used(fds) - before >= 2**21 - 2**16
        assert bounds.scratch_used([]) == 0
    finally:
        for fd in fds:
            os.close(fd)


def test_a_file_deleted_but_held_open_in_the_folder_counts(tmp_path):
    dev = os.stat(tmp_path).st_dev
    before = bounds.held_deleted({os.getpid()}, dev)
    with open(tmp_path / "held", "wb") as f:
        f.write(b"1" * 2**21)
        f.flush()
        os.fsync(f.fileno())
        assert bounds.held_deleted({os.getpid()}, dev) == before   # it has a name: a walk sees it
        os.unlink(tmp_path / "held")
        assert bounds.held_deleted({os.getpid()}, dev) - before >= 2**21
        assert bounds.held_deleted({os.getpid()}, dev + 1) == 0    # another device's: not this budget
    assert bounds.held_deleted({os.getpid()}, dev) == before


@pytest.mark.parametrize("folder", ["/tmp", "/dev/shm", "."])
def test_a_kernel_that_fills_a_writable_place_is_stopped_by_the_disk_budget(sandboxed, tmp_path, folder):
    limits = Limits(kernel_disk_mb=10)
    work = tmp_path / "w"
    work.mkdir()
    # 6 MB in its folder (under the budget alone), then 8 MB in /tmp, /dev/shm or the folder,
    # kept open and deleted so no walk over a folder would see it: the sum passes 10 MB
    code = (f"open('half.bin', 'wb').write(b'0' * 6 * 2**20)\n"
            f"import os, time\nf = open('{folder}/fill', 'wb')\nos.unlink('{folder}/fill')\n"
            "for i in range(8):\n    f.write(b'0' * 2**20); f.flush()\ntime.sleep(30)")
    k = Kernel(work, tmp_path / "rt", limits)
    try:
        with pytest.raises(DeadKernelError):
            k.run(code, timeout=60)
    finally:
        k.close()
    assert _wait_end(tmp_path / "rt") == "files-limit"
    said = setup.describe_limit_hit("files-limit", limits)
    assert "10 MB in its folder, /tmp and /dev/shm together" in said


def test_each_memory_backed_folder_holds_at_most_the_budget_and_a_full_one_names_it(tmp_path):
    limits = Limits(kernel_disk_mb=8, memory_gb=2.0)
    cmd = kernel.bwrap_command({"limits": asdict(limits), "uid": UID, "gid": UID,
                                "ro": [], "ipc_dir": str(tmp_path), "python": "python3",
                                "python_bin": "/usr/bin"}, str(tmp_path), "",
                                scratch_bytes=8 * 2**20)
    sizes = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--size"]
    assert sizes == [str(8 * 2**20)] * 2 and cmd.count("--tmpfs") == 2
    said = setup.describe_limit_hit("OSError: [Errno 28] No space left on device", limits)
    assert said and "8 MB in its folder, /tmp and /dev/shm together" in said


def test_the_count_does_not_follow_a_folder_swapped_for_a_link_after_it_was_listed(tmp_path, monkeypatch):
    """The watch (root) walks a folder the kernel writes: a folder listed, then replaced with a
    link to a large folder elsewhere before it is opened, is not read (the race, played here
    by swapping it when the count first goes to open it)."""
    top, big = tmp_path / "w", tmp_path / "elsewhere"
    (top / "d").mkdir(parents=True)
    big.mkdir()
    for i in range(50):
        (big / f"f{i}").write_bytes(b"1" * 2**16)
    swapped = []

    def swap_first(real):
        def call(where, *args, **kw):
            if where in ("d", str(top / "d")) and not swapped:   # by name or by path
                (top / "d").rmdir()
                (top / "d").symlink_to(big)
                swapped.append(where)
            return real(where, *args, **kw)
        return call

    monkeypatch.setattr(os, "open", swap_first(os.open))
    monkeypatch.setattr(os, "scandir", swap_first(os.scandir))
    n, used = bounds.usage(str(top), 10**6)
    assert swapped and n == 1 and used < 2**16, (n, used)   # "d", nothing of the link's target


def test_the_count_sees_every_entry_of_a_deep_and_wide_tree_and_stops_past_most(tmp_path):
    deep = tmp_path / "t"
    for i in range(300):                       # 300 folders, one in the other
        deep = deep / "d"
    deep.mkdir(parents=True)
    for i in range(20):
        (tmp_path / "t" / f"f{i}").write_bytes(b"1" * 5000)
        (deep / f"g{i}").write_bytes(b"1" * 5000)
    (tmp_path / "t" / "link").symlink_to(tmp_path)   # counted as an entry, never entered
    want_n, want_used = 0, 0
    for d, dirs, files in os.walk(tmp_path / "t"):
        for name in dirs + files:
            want_n += 1
            want_used += os.lstat(os.path.join(d, name)).st_blocks * 512
    fds = len(os.listdir("/proc/self/fd"))
    assert bounds.usage(str(tmp_path / "t"), 10**6) == (want_n, want_used) and want_n == 341
    assert bounds.usage(str(tmp_path / "t"), 100)[0] == 101
    assert len(os.listdir("/proc/self/fd")) == fds     # every folder's descriptor closed
