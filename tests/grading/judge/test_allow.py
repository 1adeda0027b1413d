"""The judge holds no power a student can borrow (issue 19), unit by unit: the channel's
allow-list (grader.grading.judge.allow), its budgets, the frame bound before parsing, the
socket never followed, and the judge process's identity (grader.grading.judge.confine).
The same attacks through the real pipeline: tests/grading/test_judge_confined.py."""
from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

from grader import wire
from grader.grading.judge import allow, channel
from grader.grading.judge.channel import Budget, Channel
from grader.sim import Costs, fixed_kernel, place, simulate

KERNEL = '''
import numpy as np

def gadget(target, path):
    """The first report's write: an "array" of a judge object, a 0-d object array the old
    channel exported as a handle, then its fill and tofile."""
    try:
        ch = object.__getattribute__(target, "_channel")
        arr = ch.request("array", object.__getattribute__(target, "_handle"))
        arr.fill("written by the judge")
        arr.tofile(path, sep="\\n", format="%s")
        return "wrote"
    except BaseException as e:
        return f"{type(e).__name__}: {e}"

def ask(what, obj):
    try:
        if what == "len":
            return len(obj)
        if what == "attr":
            return obj.cuda_secret
        if what == "array":
            return np.asarray(obj)
        if what == "call":
            return obj()
        if what == "iter":
            return list(obj)
        if what == "raw":
            ch = object.__getattribute__(obj, "_channel")
            return ch.request("getattr_any", object.__getattribute__(obj, "_handle"), name="x")
    except BaseException as e:
        return f"{type(e).__name__}: {e}"

def honest(torch, clock, op, x):
    y = op(x)
    torch.cuda.synchronize()
    return clock(), float((y * 1).sum()), np.asarray(y.cpu()).tolist()

def hoard(x, n):
    kept = []
    try:
        for _ in range(n):
            kept.append(x * 2)
    except MemoryError as e:
        return len(kept), str(e)
    return len(kept), ""
'''


def _pair(budget: Budget | None = None, allow_list: bool = True):
    a, b = socket.socketpair()
    ns: dict = {}
    exec(KERNEL, ns)
    kernel = Channel(b, "k", namespace=ns)
    threading.Thread(target=kernel.serve_main, daemon=True).start()
    judge = Channel(a, "j", budget=budget)
    if not allow_list:
        judge._allow = None        # the channel as it was: getattr/call on whatever it holds
    judge.deadline = time.monotonic() + 60
    return judge, kernel


def _fn(judge: Channel, name: str):
    return judge.request("global", name=name)


def test_the_ndarray_gadget_writes_through_the_old_channel_and_not_through_the_allow_list(tmp_path):
    torch, machine = simulate("torch")
    for allow_list, wrote in ((False, True), (True, False)):
        path = tmp_path / f"marker-{allow_list}"
        judge, kernel = _pair(allow_list=allow_list)
        try:
            said = _fn(judge, "gadget")(machine.clock.read, str(path))
        finally:
            judge.close()
            kernel.close()
        assert path.exists() is wrote, said            # the payload is real: it wrote, before
        if not wrote:
            assert "does not allow numpy.asarray()" in said


def test_operations_outside_the_allow_list_are_refused_with_a_message_naming_them():
    torch, machine = simulate("torch", costs=Costs(warmup_s=0))
    x = place(torch, np.ones(4, np.float32))
    op = fixed_kernel(0.01)
    judge, kernel = _pair()
    try:
        ask = _fn(judge, "ask")
        assert "does not allow len()" in ask("len", op)
        assert "does not allow numpy.asarray()" in ask("array", machine.clock.read)
        assert "does not allow calling it" in ask("call", torch)
        assert "does not allow iterating it" in ask("iter", op)
        assert "has no request 'getattr_any'" in ask("raw", torch)
        # the simulator's own words for what it does not model
        assert "does not model torch.cuda_secret" in ask("attr", torch)
        # and what the exercises need still works: the framework's API, operators, numbers
        t, total, values = _fn(judge, "honest")(torch, machine.clock.read, op, x)
        assert t >= 0.01 and total == 4.0 and values == [1.0] * 4
    finally:
        judge.close()
        kernel.close()


def test_only_the_courses_functions_and_the_simulated_frameworks_objects_cross_as_handles():
    torch, machine = simulate("torch")
    x = place(torch, np.ones(2, np.float32))
    crosses = [torch, torch.cuda, x, torch.cuda.Stream(), torch.cuda.Event(),
               machine.clock.read, fixed_kernel(0.01), x.to]
    never = [os.system, np.save, print, np.asarray(machine.clock.read), machine,
             machine.clock, types, type, lambda: 1, shutil.rmtree, open, machine.gpus[0],
             object.__getattribute__(x, "_value").tofile]
    assert all(allow.exportable(o) for o in crosses)
    assert not any(allow.exportable(o) for o in never), [o for o in never if allow.exportable(o)]


def test_exports_beyond_the_jobs_budget_are_refused_and_the_judge_keeps_no_more():
    """1,000 tensors of 4 MB (4 GB if nothing bounded them) against a budget of 16 MiB."""
    torch, _ = simulate("torch")
    x = place(torch, np.ones(2**20, np.float32))
    budget = Budget(objects=10_000, nbytes=16 * 2**20)
    before = _rss()
    judge, kernel = _pair(budget)
    try:
        kept, said = _fn(judge, "hoard")(x, 1000)
    finally:
        judge.close()
        kernel.close()
    assert 1 <= kept <= 4 and "keeps at most" in said, (kept, said)
    assert budget.used_bytes <= budget.nbytes
    assert _rss() - before < 512 * 2**20


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _frame(head: bytes) -> bytes:
    return struct.pack("!IQ", 0, len(head)) + head


def _reader(data: bytes):
    pos = [0]

    def read_exact(n: int) -> bytes:
        pos[0] += n
        return data[pos[0] - n:pos[0]]
    return read_exact


def test_a_header_that_would_expand_beyond_the_bound_is_refused_before_it_is_parsed(monkeypatch):
    parsed = []
    monkeypatch.setattr(wire.frames.json, "loads", lambda s: parsed.append(len(s)) or [])
    values = b"[" + b"[]," * 1_500_000 + b"0]"             # 4.5 MB of JSON: 1.5 M lists
    assert len(values) < wire.LIMITS.header_bytes
    with pytest.raises(wire.ProtocolError, match="more than 1000000 values"):
        wire.read_frame(_reader(_frame(values)))
    with pytest.raises(wire.ProtocolError, match="a header of"):
        wire.read_frame(_reader(struct.pack("!IQ", 0, wire.LIMITS.header_bytes + 1)))
    assert parsed == []
    wire.read_frame(_reader(_frame(b"[1,2,3]")))           # a small one is parsed
    assert parsed == [7]


def test_queued_messages_have_a_byte_budget(monkeypatch):
    monkeypatch.setattr(channel, "MAX_QUEUED_BYTES", 10_000)
    judge, kernel = _pair()
    try:
        import queue

        q: queue.Queue = queue.Queue(100)
        judge._queue(q, {"k": "req", "cost": 6_000})
        with pytest.raises(wire.ProtocolError, match="MiB of messages queued"):
            judge._queue(q, {"k": "req", "cost": 6_000})
        judge._dequeued(q.get_nowait())                     # read: its bytes are free again
        judge._queue(q, {"k": "req", "cost": 6_000})
        # what a message may take once parsed: every byte of its header a value
        assert Channel._cost(1000, [b"x" * 100]) == 100 + 900 * channel.NODE_BYTES
    finally:
        judge.close()
        kernel.close()


def test_a_link_in_the_kernels_folder_makes_the_judge_connect_to_nothing(tmp_path):
    outside = Path(tempfile.mkdtemp(prefix="listener-"))
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(outside / "l.sock"))
    srv.listen(1)
    srv.settimeout(0.5)
    try:
        os.symlink(outside / "l.sock", tmp_path / ".grading-x.sock")
        with pytest.raises(channel.ChannelClosed, match="not a socket"):
            channel.connect(str(tmp_path), ".grading-x.sock", time.monotonic() + 2)
        with pytest.raises(socket.timeout):
            srv.accept()                                   # no connection came
        # a real socket there is connected to, through the fd the check opened
        threading.Thread(target=wire.accept_one, args=(str(tmp_path / "ok.sock"), 5),
                         daemon=True).start()
        channel.connect(str(tmp_path), "ok.sock", time.monotonic() + 5).close()
    finally:
        srv.close()
        shutil.rmtree(outside)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a uid to drop to")
def test_a_socket_closed_to_the_unprivileged_judge_is_a_clear_channel_error():
    """A student who makes the channel's socket unwritable to others: the judge (another
    uid) says so, as a ChannelClosed the feedback shows, not a bare PermissionError."""
    import subprocess
    import sys

    tmp_path = Path(tempfile.mkdtemp(prefix="closed-socket-"))   # (pytest's own are 0700)
    tmp_path.chmod(0o755)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(tmp_path / "c.sock"))
    os.chmod(tmp_path / "c.sock", 0o600)
    srv.listen(1)
    try:
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
             "import time\nfrom grader.grading.judge import channel\ntry:\n"
             f"    channel.connect({str(tmp_path)!r}, 'c.sock', time.monotonic() + 5)\n"
             "except channel.ChannelClosed as e:\n    print('closed:', e)\n"],
            capture_output=True, text=True, timeout=60,
            cwd="/", env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    finally:
        srv.close()
        shutil.rmtree(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("closed: the notebook's grading channel is closed to the grader")


@pytest.mark.skipif(os.geteuid() != 0, reason="the judge gives up root only when it has it")
def test_the_judge_runs_unprivileged_with_a_clean_path_and_sees_only_what_it_needs(tmp_path, monkeypatch):
    """A judge process started as root: not root from its first test cell on, cannot open a
    root-only file, works in / with its own TMPDIR, has neither the working directory nor
    the course folder on its path, and still loads the hidden checks."""
    from grader.grading.judge.process import JudgeProcess
    from tests.grading.judge.test_process import test_cell

    course = tmp_path / "course"
    shutil.copytree(Path(__file__).resolve().parents[3] / "exercises" / "hidden", course / "hidden")
    (course / "nbgrader_config.py").write_text("")
    secret = tmp_path / "secret.txt"
    secret.write_text("root's")
    secret.chmod(0o600)
    kernel_dir = tmp_path / "kernel"
    kernel_dir.mkdir(mode=0o755)
    monkeypatch.chdir(course)
    monkeypatch.syspath_prepend(str(course))              # as `python -m` in the course folder
    monkeypatch.setenv("COURSE_HUB_PASSWORD", "hunter2")
    name = ".grading-0.sock"
    threading.Thread(target=wire.accept_one, args=(str(kernel_dir / name), 30),
                     daemon=True).start()
    jp = JudgeProcess(course_root=str(course), kernel_folder=str(kernel_dir))
    try:
        got = test_cell(jp, kernel_dir, name, f"""
import json, os, sys, tempfile
from grader.grading.hidden import load
try:
    open({str(secret)!r}).read()
    opened = True
except PermissionError:
    opened = False
print(json.dumps({{"uid": os.getuid(), "euid": os.geteuid(), "cwd": os.getcwd(),
                  "path": sys.path, "opened": opened, "tmp": tempfile.gettempdir(),
                  "hidden": hasattr(load("a1_independent_ops"), "check_time_work"),
                  "env": sorted(os.environ)}}))
""", seconds=60)
    finally:
        jp.close()
    seen = json.loads("".join(s[2] for s in got["streams"]))
    assert seen["uid"] != 0 and seen["euid"] != 0 and not seen["opened"]
    assert seen["cwd"] == "/" and seen["hidden"] and "COURSE_HUB_PASSWORD" not in seen["env"]
    assert os.path.basename(seen["tmp"]).startswith("course-judge-")
    assert not os.path.exists(seen["tmp"])                 # removed with the judge
    assert not [p for p in seen["path"] if not p or p.startswith((str(course), str(tmp_path)))]


GATE_SCRIPT = r'''
import json, os, subprocess, sys, tempfile
from grader.grading.config import Limits, SandboxConfig
from grader.grading.judge import rankgate
from grader.grading.sandbox import setup
rt = tempfile.mkdtemp(prefix="gate-rt-")
setup.prepare(Limits(processes=256), SandboxConfig(uid_base=63000), 3, rt)
settings = os.path.join(rt, "sandbox.json")
judge = 63003 + 1000
tmp = tempfile.mkdtemp(prefix="course-judge-", dir="/tmp")
os.chown(tmp, judge, judge)
gate = rankgate.start(settings, tmp, judge)
python = json.load(open(settings))["python"]
def ask(folder):
    return subprocess.run(["setpriv", f"--reuid={judge}", f"--regid={judge}", "--clear-groups",
                           *rankgate.client_command(gate), folder, "--", python, "-c",
                           "import os; print(os.getuid(), sorted(os.listdir('.')))"],
                          capture_output=True, text=True, timeout=120)
good = os.path.join(tmp, "course-rank-good"); os.mkdir(good); os.chown(good, judge, judge)
open(os.path.join(good, "mine"), "w").close()
link = os.path.join(tmp, "course-rank-link"); os.symlink("/etc", link)
elsewhere = tempfile.mkdtemp(prefix="course-rank-"); os.chown(elsewhere, judge, judge)
out = {name: (p.returncode, p.stdout.strip(), p.stderr.strip()[-300:])
       for name, p in (("good", ask(good)), ("link", ask(link)), ("elsewhere", ask(elsewhere)))}
out["good_left"] = os.path.exists(good)
out["etc_mode"] = oct(os.stat("/etc").st_mode)
import shutil
for p in (rt, tmp, elsewhere):
    shutil.rmtree(p, ignore_errors=True)
print(json.dumps(out))
'''


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None,
                    reason="the rank gate starts sandboxes: root and bubblewrap")
def test_the_rank_gate_starts_a_rank_only_in_a_fresh_folder_of_the_judges_and_follows_no_link():
    import subprocess
    import sys

    etc_before = oct(os.stat("/etc").st_mode)
    done = subprocess.run([sys.executable, "-c", GATE_SCRIPT], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    code, said, _ = out["good"]
    assert code == 0 and said == "63003 ['mine']", out["good"]     # the slot's uid, its folder
    assert out["link"][0] != 0 and "refused" in out["link"][2], out["link"]
    assert out["elsewhere"][0] != 0 and "refused" in out["elsewhere"][2], out["elsewhere"]
    assert not out["good_left"] and out["etc_mode"] == etc_before   # removed; /etc untouched


ORPHAN_SCRIPT = r'''
import json, os, sys, tempfile, time
from grader.grading.judge import rankgate
settings = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
settings.write("{}"); settings.close()
tmp = tempfile.mkdtemp(prefix="course-judge-", dir="/tmp")
r, w = os.pipe()
judge = os.fork()
if judge == 0:                      # the judge: forks its gate as root, then gives root up
    os.close(r)
    rankgate.start(settings.name, tmp, 65534)
    gate = open(f"/proc/self/task/{os.getpid()}/children").read().split()
    os.write(w, json.dumps(gate).encode())
    os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
    time.sleep(0.5)
    os._exit(0)                     # the judge ends (killed or done: the same for the gate)
os.close(w)
gate = int(json.loads(os.read(r, 4096))[0])
os.waitpid(judge, 0)
end = time.monotonic() + 20
while os.path.exists(f"/proc/{gate}") and time.monotonic() < end:
    try:                            # reap it if it became ours (a subreaper), else wait
        os.waitpid(gate, os.WNOHANG)
    except ChildProcessError:
        pass
    time.sleep(0.1)
alive = os.path.exists(f"/proc/{gate}") and open(f"/proc/{gate}/stat").read().split(")")[-1].split()[0] != "Z"
if alive:
    os.kill(gate, 9)
os.unlink(settings.name)
import shutil; shutil.rmtree(tmp, ignore_errors=True)
print(json.dumps({"gate_outlived_its_judge": alive}))
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="the rank gate is root's: a judge gives root up")
def test_the_rank_gate_ends_with_a_judge_that_gave_root_up():
    """The parent-death signal is sent with the dying judge's credentials, which may not
    signal root: before the gate watched a pipe, every judge left its root gate behind."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", ORPHAN_SCRIPT], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"gate_outlived_its_judge": False}
