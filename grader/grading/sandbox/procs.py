"""Finding and ending the processes a grading worker started (kernels, their sandboxes).

jupyter_client starts each kernel in a new session, so killing a worker's process group
does not reach it; walking the parent links in ``/proc`` does.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

__all__ = ["descendants", "kill_descendants", "alive", "kill_uid", "uid_of"]


def _parents() -> dict[int, int]:
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        rest = stat[stat.rindex(")") + 2:].split()
        out[int(d.name)] = int(rest[1])
    return out


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid``, children first."""
    parents = _parents()
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def kill_descendants(pid: int | None = None, sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` to every process below ``pid`` (default: this one); how many got it."""
    n = 0
    for p in reversed(descendants(os.getpid() if pid is None else pid)):
        try:
            os.kill(p, sig)
            n += 1
        except ProcessLookupError:
            pass
    return n


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def uid_of(pid: int) -> int | None:
    """The real uid of process ``pid`` (None: gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def kill_uid(uid: int, within: float = 5.0) -> int:
    """SIGKILL every process whose real uid is ``uid`` (a sandbox slot's: no other process
    runs as it) until none is left or ``within`` seconds passed; how many were sent it."""
    import time

    if uid <= 0:
        raise ValueError(f"kill_uid: refusing uid {uid}")
    sent, end = 0, time.monotonic() + within
    while time.monotonic() < end:
        left = [int(d.name) for d in Path("/proc").iterdir()
                if d.name.isdigit() and uid_of(int(d.name)) == uid]
        if not left:
            break
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
                sent += 1
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    return sent
