"""Unix sockets below a long TMPDIR (:mod:`grader.unixsock`): a socket address holds 107
bytes, and with a TMPDIR of ~120 characters every a7/a10 rank had failed on "AF_UNIX path
too long" (the relay's socket, the rank gate's), scoring an honest student 0.
(The relay end to end under such a TMPDIR: tests/ranks/test_long_tmpdir.py.)"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grader import unixsock, wire

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def deep(tmp_path) -> Path:
    """A folder whose path is ~130 bytes (a socket in it could not be bound by its path)."""
    folder = tmp_path / ("t" * max(10, 130 - len(str(tmp_path))))
    folder.mkdir()
    assert len(os.fsencode(folder / "rank.sock")) > unixsock.SUN_PATH_MAX
    return folder


def test_the_rank_s_socket_in_a_long_folder_is_bound_and_reached(deep):
    path = str(deep / "rank.sock")
    got = {}

    def rank():       # what grader.ranks.stub does: wait for the relay on the socket
        conn = wire.accept_one(path, 20)
        got["said"] = conn.recv(5)
        conn.close()

    t = threading.Thread(target=rank)
    t.start()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(2000):
        try:
            unixsock.connect(sock, path)     # what the relay does
            break
        except (FileNotFoundError, ConnectionRefusedError):
            threading.Event().wait(0.005)
    sock.sendall(b"hello")
    sock.close()
    t.join(20)
    assert got == {"said": b"hello"} and not os.path.exists(path)   # gone once accepted


def test_a_link_in_the_socket_s_place_is_refused_not_followed(deep, tmp_path):
    other = tmp_path / "other.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(other))
    srv.listen(1)
    os.symlink(other, deep / "rank.sock")
    with pytest.raises(ConnectionRefusedError, match="is not a socket"):
        unixsock.connect(socket.socket(socket.AF_UNIX), deep / "rank.sock")
    srv.settimeout(0.2)
    with pytest.raises(socket.timeout):
        srv.accept()                      # nothing reached the other socket
    srv.close()


def test_without_proc_a_path_too_long_is_refused_at_start_up_saying_what_to_do(deep, monkeypatch):
    monkeypatch.setattr(unixsock, "_by_fd", lambda: False)
    why = unixsock.problem(deep / "rank.sock")
    assert why and "more than the 107" in why and "TMPDIR=/tmp" in why and str(deep) in why
    assert unixsock.problem("/tmp/course-rank-x/rank.sock") is None
    with pytest.raises(OSError, match="TMPDIR=/tmp"):
        unixsock.bind(socket.socket(socket.AF_UNIX), deep / "rank.sock")
    # with /proc, only a socket's own name can be too long
    monkeypatch.undo()
    assert unixsock.problem(deep / "rank.sock") is None
    assert "name" in unixsock.problem(deep / ("s" * 100))


def test_student_ranks_check_their_sockets_before_any_process_starts(deep, monkeypatch):
    from grader.ranks import relay

    monkeypatch.setattr(unixsock, "_by_fd", lambda: False)
    monkeypatch.setenv(relay.JOB_TMP, str(deep))
    started = []
    monkeypatch.setattr(relay.subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(RuntimeError, match="the ranks cannot start: .*TMPDIR=/tmp"):
        relay.StudentRanks(2, 10.0)
    assert started == [] and os.listdir(deep) == []


GATE = r'''
import json, os, subprocess, sys, tempfile
from grader.grading.judge import rankgate
tmp = sys.argv[1]
settings = os.path.join(tmp, "settings.json")
open(settings, "w").write("{}")
gate = rankgate.start(settings, tmp, os.getuid())
elsewhere = tempfile.mkdtemp(prefix="course-rank-")
p = subprocess.run([*rankgate.client_command(gate), elsewhere, "--", "true"],
                   capture_output=True, text=True, timeout=60)
os.rmdir(elsewhere)
print(json.dumps([gate, p.returncode, p.stderr.strip()[-300:]]))
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="the rank gate is started by root")
def test_the_rank_gate_listens_and_answers_in_a_long_judge_folder(deep):
    done = subprocess.run([sys.executable, "-c", GATE, str(deep)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    gate, code, said = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(os.fsencode(gate)) > unixsock.SUN_PATH_MAX
    # the client reached the gate, and the gate answered (refusing a folder not the judge's)
    assert code == 3 and "the rank gate refused the rank: ValueError: a rank's folder is a fresh" in said, said
