"""Unix sockets whose path may be longer than a socket address holds.

A unix socket's address (``sun_path``) holds 107 bytes and a NUL. The grader's sockets live
in folders below ``$TMPDIR`` (a rank's folder in its job's temporary folder, the rank gate in
the judge's): with a long ``TMPDIR`` (a cluster's per-job scratch, a macOS-style
``/var/folders/...``) their paths pass 107 bytes, ``bind`` and ``connect`` fail with
"AF_UNIX path too long", and every a7/a10 rank of an honest student failed. So these sockets
are never addressed by their path:

- :func:`bind` binds ``<folder>/<name>`` as ``/proc/self/fd/<fd of folder>/<name>``;
- :func:`connect` opens the socket itself (``O_PATH | O_NOFOLLOW``: a link put in its place
  is refused, never followed), checks that it is a socket and connects to
  ``/proc/self/fd/<fd>``, which names the very file just checked.

Both addresses are short whatever the folder's path. Where ``/proc`` is not mounted (or
the system has no ``O_PATH``), a path that fits is used as it is; one that does not is
refused by :func:`problem`, which callers run at start-up, before any student process is
started, so that the instructor reads why (and what to do) instead of every rank failing.
Only the standard library: the rank gate's client imports this.
"""
from __future__ import annotations

import os
import socket
import stat

__all__ = ["SUN_PATH_MAX", "problem", "bind", "connect"]

SUN_PATH_MAX = 107          # bytes of a socket's path (sun_path is 108, with the NUL)
_PROC_FD = "/proc/self/fd"


def _by_fd() -> bool:
    return hasattr(os, "O_PATH") and os.path.isdir(_PROC_FD)


def _fits(address: str) -> bool:
    return len(os.fsencode(address)) <= SUN_PATH_MAX


def problem(path: str | os.PathLike) -> str | None:
    """Why a unix socket at ``path`` could be neither bound nor reached, or None."""
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    if _by_fd():
        # the longest address used: /proc/self/fd/<fd>/<name>, fds below a million
        if _fits(f"{_PROC_FD}/999999/{name}"):
            return None
        return (f"the unix socket name {name!r} is too long: a socket address holds "
                f"{SUN_PATH_MAX} bytes")
    if _fits(path):
        return None
    return (f"the unix socket {path} is {len(os.fsencode(path))} bytes long, more than the "
            f"{SUN_PATH_MAX} a socket address holds, and {_PROC_FD} (through which a socket is "
            f"reached by a short name whatever its folder) is not there: set TMPDIR to a short "
            f"folder (TMPDIR=/tmp), or mount /proc")


def bind(sock: socket.socket, path: str | os.PathLike) -> None:
    """``sock.bind(path)``, for a ``path`` of any length (see the module docstring)."""
    path = os.fspath(path)
    if not _by_fd():
        why = problem(path)
        if why:
            raise OSError(why)
        sock.bind(path)
        return
    folder, name = os.path.split(path)
    fd = os.open(folder or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sock.bind(f"{_PROC_FD}/{fd}/{name}")
    finally:
        os.close(fd)


def connect(sock: socket.socket, path: str | os.PathLike) -> None:
    """``sock.connect(path)``, for a ``path`` of any length, never following a link put in
    the socket's place (see the module docstring). Raises ``FileNotFoundError`` while there
    is no such socket and ``ConnectionRefusedError`` while nothing listens, as ``connect``
    does; a file that is not a socket raises ``ConnectionRefusedError`` too, saying so."""
    path = os.fspath(path)
    if not _by_fd():
        why = problem(path)
        if why:
            raise OSError(why)
        sock.connect(path)
        return
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise ConnectionRefusedError(f"{path} is not a socket (a link or a file stands "
                                         "in its place)")
        sock.connect(f"{_PROC_FD}/{fd}")
    finally:
        os.close(fd)
