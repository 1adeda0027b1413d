"""The wire format (grader/wire/): one place, usable from grader.lab, and bounded: what a
process running student code sends is refused with the limit's name before it costs the
receiver more than a bounded amount of time and memory."""
from __future__ import annotations

import ast
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader import wire
from grader.wire import Decoder, Limits, ProtocolError

ROOT = Path(__file__).resolve().parents[1]
P = 2**61 - 1          # hash(k * P) == 0 for every int k


def decode(tree, buffers=(), limits=wire.LIMITS):
    return Decoder("j", list(buffers), lambda *h: ("handle", h), limits=limits).decode(tree)


def test_grader_lab_never_imports_grader_grading():
    for path in sorted((ROOT / "grader" / "lab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                names = [("grader." if node.level == 2 else "") + mod if node.level else mod]
            assert not any(n.startswith(("grader.grading", "grading")) for n in names), \
                f"{path.relative_to(ROOT)} imports {names}"


def test_the_wire_format_is_written_once():
    """Framing (struct '!IQ') lives in grader/wire/frames.py only."""
    users = [p.relative_to(ROOT).as_posix() for p in (ROOT / "grader").rglob("*.py")
             if '"!IQ"' in p.read_text()]
    assert users == ["grader/wire/frames.py"]


def test_a_hash_collision_payload_is_refused_quickly():
    keys = [{"i": str(k * P)} for k in range(1, 20_001)]
    t0 = time.perf_counter()
    with pytest.raises(ProtocolError, match="share one hash"):
        decode({"d": [[k, 0] for k in keys], "n": 0})
    with pytest.raises(ProtocolError, match="share one hash"):
        decode({"s": keys, "n": 0})
    with pytest.raises(ProtocolError, match="share one hash"):     # a list a check may hash
        decode({"l": [{"t": [k, 1], "n": i + 1} for i, k in enumerate(keys)], "n": 0})
    assert time.perf_counter() - t0 < 5          # (without the guard: minutes)


def test_honest_values_sharing_a_hash_pass():
    # -1 and -2 hash alike; 1, 1.0 and True are equal; many copies of one value are fine
    got = decode({"l": [-1, -2, 1, 1.0, True] + [7] * 10_000 + [{"i": str(P)}], "n": 0})
    assert got[:5] == [-1, -2, 1, 1.0, True] and got[-1] == P


@pytest.mark.parametrize("tree, limits, message", [
    ({"l": [0] * 1001, "n": 0}, Limits(nodes=1000), "more than 1000 values"),
    ({"i": "9" * 5000}, Limits(), "more than 4300 digits"),
    ({"a": ["<f4", [1] * 40, 0], "n": 0}, Limits(), "more than 32 dimensions"),
])
def test_size_limits_name_themselves(tree, limits, message):
    with pytest.raises(ProtocolError, match=message):
        decode(tree, [b"\0" * 4], limits)


def test_deep_nesting_is_refused_in_the_tree_and_in_the_json():
    deep: dict = {"l": [], "n": 0}
    for i in range(100):
        deep = {"l": [deep], "n": i + 1}
    with pytest.raises(ProtocolError, match="nested too deeply"):
        decode(deep)
    head = b"[" * 200_000 + b"]" * 200_000
    frame = struct.pack("!IQ", 0, len(head)) + head
    with pytest.raises(ProtocolError, match="nested too deeply"):
        wire.loads(frame)


def test_framing_refuses_oversized_messages_before_reading_them():
    read = iter([struct.pack("!IQ", 0, 2**40)]).__next__
    with pytest.raises(ProtocolError, match="header of 1099511627776 bytes"):
        wire.read_frame(lambda n: read())
    chunks = iter([struct.pack("!IQ", 1, 2), b"{}", struct.pack("!Q", 2**31)])
    with pytest.raises(ProtocolError, match="bytes of arrays"):
        wire.read_frame(lambda n: next(chunks))


def test_decoding_stops_at_its_time_limit():
    tree = {"l": [0.5] * 5000, "n": 0}     # (the clock is read every 4096 values)
    with pytest.raises(ProtocolError, match="decoding took more than"):
        decode(tree, limits=Limits(seconds=0.0))


def test_the_sender_refuses_what_the_receiver_would_refuse():
    with pytest.raises(ValueError, match="too large to send"):
        wire.Encoder("k", lambda o: None, limits=Limits(nodes=100)).encode(list(range(200)))


@wire.value_type
@dataclass(frozen=True)
class _Pair:
    a: int
    b: tuple


def test_a_value_type_registers_itself_and_rebuilds_from_fields_only():
    got = wire.loads(wire.dumps([_Pair(1, (2, 3))]))
    assert got == [_Pair(1, (2, 3))]
    name = f"{__name__}._Pair"
    with pytest.raises(ProtocolError, match="fields"):
        decode({"v": name, "x": {"a": 1}, "n": 0})
    # not registered, outside the course's libraries: never imported by name
    with pytest.raises(ProtocolError, match="is not a value type"):
        decode({"v": "os.path.join", "x": {}, "n": 0})
    with pytest.raises(ProtocolError, match="is not a value type"):
        decode({"v": "grader.grading.run.worker.LEASE_S", "x": {}, "n": 0})


def test_the_courses_value_types_need_no_list():
    from grader.lab.planner import Strategy
    from grader.lab.core.timeline import Interval, Timeline

    s = wire.loads(wire.dumps(Strategy(2, 1, ("R", "col"))))
    assert s == Strategy(2, 1, ("R", "col"))
    tl = Timeline("t", [Interval("gpu0", 0.0, 1.0)])
    assert wire.loads(wire.dumps(tl)) == tl
    # a list where the frozen class needs a tuple: rebuilt as the class says
    enc = wire.Encoder("x", lambda o: None)
    tree = enc.encode(s)
    tree["x"]["placements"] = {"l": ["R"], "n": 9}
    assert decode(tree).placements == ("R",)


def test_a_peer_never_finds_the_socket_closed_to_it_or_not_listening(tmp_path, monkeypatch):
    """The judge (another uid) connects the moment the path appears: a kernel descheduled
    between bind and chmod once made it find the umask's mode (PermissionError) and the
    kernel then waited for a judge that had given up (a judged cell counted as one that
    ended the kernel)."""
    import os
    import socket
    import threading
    import time

    from grader import wire

    real_chmod = os.chmod

    def slow_chmod(*a, **k):          # the kernel loses the CPU right after bind
        time.sleep(0.3)
        return real_chmod(*a, **k)

    monkeypatch.setattr(os, "chmod", slow_chmod)
    path = tmp_path / "s"
    t = threading.Thread(target=wire.accept_one, args=(str(path), 10), daemon=True)
    t.start()
    end = time.monotonic() + 10
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.0005)
    first_mode = path.stat().st_mode & 0o777       # what a peer sees first
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(str(path))                           # listening already: not refused
    t.join(10)
    c.close()
    assert first_mode == 0o666
    assert sorted(os.listdir(tmp_path)) == []      # the staging name is gone too


def test_accept_one_serves_one_connection_and_leaves_no_socket_behind(tmp_path):
    import socket
    import threading

    from grader import wire

    path = str(tmp_path / "s")
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("conn", wire.accept_one(path, 10)))
    t.start()
    def mode():   # bind makes the path, then accept_one opens it to every user
        try:
            return oct((tmp_path / "s").stat().st_mode & 0o777)
        except FileNotFoundError:
            return None
    for _ in range(500):
        if mode() == "0o666":
            break
        threading.Event().wait(0.01)
    assert mode() == "0o666"   # the peer may be another user
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    t.join(10)
    conn = got["conn"]
    assert conn.gettimeout() is None and not (tmp_path / "s").exists()
    c.sendall(b"x")
    assert conn.recv(1) == b"x"
    conn.close()
    c.close()
    with pytest.raises(TimeoutError):   # nobody comes: the timeout, and the path is gone
        wire.accept_one(str(tmp_path / "t"), 0.2)
    assert not (tmp_path / "t").exists()
