"""The judge process (grader.grading.judge.process): test cells run in a process of the
notebook's own that answers in bounded JSON, and that the grading process can kill, with
what it started, when a cell does not come back; the next cell gets a fresh one."""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from grader.grading.judge import channel
from grader.grading.judge.cells import MAX_STREAM_CHARS
from grader.grading.judge.process import JudgeProcess


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """The kernel's side: names in ``__main__``, served from ``tmp_path`` per test cell."""
    import __main__

    monkeypatch.chdir(tmp_path)
    tmp_path.chmod(0o755)     # as nbgrader's folders: the judge's uid looks up the socket
    monkeypatch.setattr(__main__, "answer", lambda: 41, raising=False)
    count = iter(range(100))

    def serve() -> str:
        name = f".grading-{next(count)}.sock"
        threading.Thread(target=channel.serve, args=(name, 30.0), daemon=True).start()
        return name

    return serve


def test_cell(jp: JudgeProcess, folder: Path, socket: str, source: str, seconds: float = 60):
    jp.prepare()
    jp.send({"op": "test", "source": source, "filename": "<test cell>", "folder": str(folder),
             "socket": socket, "deadline": time.monotonic() + seconds})
    end = time.monotonic() + seconds + 30
    while not jp.poll():
        assert time.monotonic() < end, "no answer"
        time.sleep(0.01)
    return jp.receive()


test_cell.__test__ = False   # a helper, not a test


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] not in "ZX"
    except OSError:
        return False


def test_locked_cells_and_test_cells_run_in_the_judge_and_answer_as_outputs(kernel, tmp_path):
    jp = JudgeProcess()
    try:
        jp.locked("BASE = 1", "<locked cell 1>")
        got = test_cell(jp, tmp_path, kernel(), "print('hi')\nanswer() + BASE")
        assert got["value"] == "42" and got["error"] is None and not got["timeout"]
        assert "".join(text for _, _, text in got["streams"]) == "hi\n"
        got = test_cell(jp, tmp_path, kernel(), "assert answer() == 1, 'nope'")
        assert got["error"]["ename"] == "AssertionError" and got["error"]["evalue"] == "nope"
        assert not any("grading/judge/process.py" in line for line in got["error"]["traceback"])
        # what a cell prints is bounded, with a note where it was cut
        got = test_cell(jp, tmp_path, kernel(), "for _ in range(50):\n    print('x' * 100_000)")
        text = "".join(t for _, _, t in got["streams"])
        assert MAX_STREAM_CHARS <= len(text) < MAX_STREAM_CHARS + 200 and "output cut" in text
    finally:
        jp.close()


def test_a_judge_stuck_holding_the_gil_is_killed_with_what_it_started(kernel, tmp_path):
    """A check stuck in C code (here ``sum`` over 10**13 integers, which never releases the
    GIL) stalls only its own process: this process keeps running; kill() ends the judge and
    the process the cell started, and a fresh judge, with the locked cells run again,
    judges the next cell."""
    jp = JudgeProcess()
    ticks = [0]
    stop = threading.Event()
    # the judge's cwd is / and, started as root, its uid is not ours: a folder it may write
    out = Path(tempfile.mkdtemp(prefix="judge-out-", dir="/tmp"))
    out.chmod(0o777)

    def tick():
        while not stop.wait(0.01):
            ticks[0] += 1

    threading.Thread(target=tick, daemon=True).start()
    try:
        jp.locked("BASE = 1", "<locked cell 1>")
        jp.prepare()
        jp.send({"op": "test", "filename": "<test cell>", "folder": str(tmp_path),
                 "socket": kernel(), "deadline": time.monotonic() + 60,
                 "source": "import subprocess\n"
                           "p = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
                           f"open({str(out / 'child.pid')!r}, 'w').write(str(p.pid))\nanswer()\n"
                           "sum(range(10**13))"})
        end = time.monotonic() + 60
        while not (out / "child.pid").exists() and time.monotonic() < end:
            time.sleep(0.05)
        before = ticks[0]
        time.sleep(1.0)
        assert not jp.poll() and ticks[0] - before >= 10    # stuck there, running here
        pid = int((out / "child.pid").read_text())
        assert running(pid)
        jp.kill()
        assert not running(pid)
        got = test_cell(jp, tmp_path, kernel(), "answer() + BASE")
        assert got["value"] == "42"
    finally:
        stop.set()
        jp.close()
        shutil.rmtree(out, ignore_errors=True)


def test_a_kernel_that_never_opens_the_channel_gives_a_timeout(tmp_path):
    tmp_path.chmod(0o755)
    jp = JudgeProcess()
    try:
        got = test_cell(jp, tmp_path, ".never.sock", "1", seconds=1)
        assert got["timeout"] and got["error"]["ename"] == "RemoteTimeout"
    finally:
        jp.close()


def _group_of(pid: int) -> str | None:
    """The memory control group (v1) or the unified group (v2) of ``pid``."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") or controllers == "":
            if "course-judge-" in path:
                return path
    return None


def test_each_judge_process_runs_in_a_group_with_the_jobs_memory_limit(kernel, tmp_path):
    """The judge's work for a student is bounded as a whole, like the student's kernel: a
    check that builds a value larger than the job's memory limit ends that judge process
    (its group's limit, not the machine's memory), the worker learns why, the group is
    removed with the process, and a fresh judge judges the next cell."""
    from grader.grading.sandbox import bounds

    probe = bounds.Box.create(f"course-judge-probe-{os.getpid()}", 2**28, 64)
    if probe is None:
        pytest.skip("this machine allows the grading process no control group")
    probe.remove()
    jp = JudgeProcess(memory_bytes=256 * 2**20)
    try:
        got = test_cell(jp, tmp_path, kernel(), "answer()")
        assert got["value"] == "41"
        pid = jp._proc.pid
        group = _group_of(pid)
        assert group is not None and group.endswith(f"course-judge-{pid}-{os.getpid()}")
        limit = next(d for d in jp._box.dirs.values() if (d / "memory.limit_in_bytes").exists()
                     or (d / "memory.max").exists())
        name = "memory.limit_in_bytes" if (limit / "memory.limit_in_bytes").exists() else "memory.max"
        assert int((limit / name).read_text()) == 256 * 2**20
        # 600 MB written: under the judge's RLIMIT_DATA (3 GiB), over the group's 256 MiB
        jp.send({"op": "test", "source": "big = b'x' * (600 * 2**20)\nlen(big)",
                 "filename": "<test cell>", "folder": str(tmp_path), "socket": kernel(),
                 "deadline": time.monotonic() + 60})
        end = time.monotonic() + 90
        while not jp.poll() and time.monotonic() < end:
            time.sleep(0.05)
        with pytest.raises((EOFError, OSError)):
            jp.receive()
        assert jp.hit_memory_limit()
        jp.kill()
        assert not limit.exists() and not running(pid)
        got = test_cell(jp, tmp_path, kernel(), "answer() + 1")
        assert got["value"] == "42" and _group_of(jp._proc.pid) is not None
    finally:
        jp.close()
