"""Free TCP ports for a run's rendezvous, chosen outside the kernel's ephemeral range.

A port found free by binding port 0 is one the kernel hands out on its own: between the
moment it is found and the moment the run's server binds it, any other program on the
machine that connects somewhere or listens on port 0 (a gloo rank, a test beside this
one) can be given it. A launcher whose port was taken that way does not always fail: a
torchrun agent that cannot host its rendezvous store on the port joins it as a client and
waits on whatever listens there. The kernel never hands out a port below its ephemeral
range (``/proc/sys/net/ipv4/ip_local_port_range``), so a port chosen there at random and
found free stays free unless another program asks for that very port.
"""
from __future__ import annotations

import random
import socket

__all__ = ["free_port", "free_ports", "ephemeral_range"]

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 10000          # below: ports services are more likely to claim by number
_random = random.SystemRandom()


def ephemeral_range(path: str = RANGE_FILE) -> tuple[int, int]:
    """The ports the kernel picks from for port 0 and outgoing connections (Linux's
    default where the file cannot be read)."""
    try:
        with open(path) as f:
            lo, hi = (int(v) for v in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))      # every IPv4 address: a listener on any of them is in use
        except OSError:
            return False
    return True


def free_ports(n: int, range_file: str = RANGE_FILE) -> list[int]:
    """``n`` distinct ports that are free now, outside the ephemeral range where it leaves
    at least 1,000 ports to choose from (else the kernel's own choices)."""
    lo, hi = ephemeral_range(range_file)
    pools = [r for r in (range(LOWEST, lo), range(hi + 1, 65536)) if len(r) >= 1000]
    ports: list[int] = []
    if pools:
        pool = max(pools, key=len)
        for _ in range(200 * n):
            if len(ports) == n:
                break
            p = _random.choice(pool)
            if p not in ports and _is_free(p):
                ports.append(p)
    if len(ports) < n:          # no room outside the range: the kernel's choice, held together
        socks = []
        for _ in range(n - len(ports)):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
        for s in socks:
            s.close()
    return ports


def free_port() -> int:
    """One free port outside the ephemeral range (:func:`free_ports`)."""
    return free_ports(1)[0]
