"""grader.lab.core.ports: rendezvous ports the kernel never hands out on its own."""
import socket

from grader.lab.core import ports


def _range_file(tmp_path, text: str) -> str:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    return str(path)


def test_ports_are_distinct_free_and_below_the_ephemeral_range(tmp_path):
    got = ports.free_ports(20, _range_file(tmp_path, "32768\t60999\n"))
    assert len(set(got)) == 20
    assert all(ports.LOWEST <= p < 32768 for p in got), got
    for p in got:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))       # free: a server can bind it


def test_the_machines_own_range_is_read_and_kept_out():
    lo, hi = ports.ephemeral_range()
    assert 0 < lo <= hi <= 65535
    got = ports.free_ports(5)
    if lo - ports.LOWEST >= 1000 or 65535 - hi >= 1000:
        assert not [p for p in got if lo <= p <= hi], (got, lo, hi)


def test_above_the_range_when_there_is_no_room_below(tmp_path):
    got = ports.free_ports(3, _range_file(tmp_path, "10500 50000"))
    assert all(50000 < p <= 65535 for p in got), got


def test_a_range_that_leaves_no_room_falls_back_to_the_kernels_choice(tmp_path):
    got = ports.free_ports(4, _range_file(tmp_path, "1024 65535"))
    assert len(set(got)) == 4 and all(0 < p <= 65535 for p in got)


def test_an_unreadable_range_is_linuxs_default(tmp_path):
    assert ports.ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
    assert ports.ephemeral_range(_range_file(tmp_path, "garbage")) == (32768, 60999)


def test_a_port_something_listens_on_is_not_free():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not ports._is_free(s.getsockname()[1])
