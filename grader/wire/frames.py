"""Framing (:mod:`grader.wire`): one message is ``!IQ`` (buffer count, header length), the
JSON header, then each buffer as ``!Q`` length + bytes; and the data-only helpers on top."""
from __future__ import annotations

import json
import struct
from typing import Any, Callable

from .codec import Decoder, Encoder
from .limits import LIMITS, Limits, ProtocolError

__all__ = ["pack", "read_frame", "dumps", "loads", "socket_reader", "send_value", "recv_value",
           "accept_one"]

_HEAD = struct.Struct("!IQ")
_LEN = struct.Struct("!Q")


def pack(header: Any, buffers: list[bytes]) -> bytes:
    """One message: the framing, the header as JSON, the buffers."""
    head = json.dumps(header, separators=(",", ":")).encode()
    parts = [_HEAD.pack(len(buffers), len(head)), head]
    for b in buffers:
        parts += [_LEN.pack(len(b)), b]
    return b"".join(parts)


def read_frame(read_exact: Callable[[int], bytes], limits: Limits = LIMITS) -> tuple[Any, list[bytes]]:
    """One message from ``read_exact(n)`` (which returns exactly ``n`` bytes or raises):
    ``(header, buffers)``; :class:`ProtocolError` if it is over a limit or not JSON."""
    nbuf, nhead = _HEAD.unpack(read_exact(_HEAD.size))
    if nhead > limits.header_bytes:
        raise ProtocolError(f"message too large: a header of {nhead} bytes (limit "
                            f"{limits.header_bytes})")
    if nbuf > limits.buffers:
        raise ProtocolError(f"message too large: {nbuf} buffers (limit {limits.buffers})")
    head = read_exact(nhead)
    # what json.loads would build, bounded before it runs: every value of the tree but the
    # first follows a separator or opens a container, so this counts at least as many
    # values as there are (separators inside strings too: it never counts fewer)
    values = 1 + sum(head.count(c) for c in (b",", b":", b"[", b"{"))
    if values > limits.nodes:
        raise ProtocolError(f"message too large: a header of more than {limits.nodes} values")
    buffers, total = [], 0
    for _ in range(nbuf):
        (n,) = _LEN.unpack(read_exact(_LEN.size))
        total += n
        if total > limits.buffer_bytes:
            raise ProtocolError(f"message too large: more than {limits.buffer_bytes} bytes of "
                                "arrays")
        buffers.append(read_exact(n))
    try:
        return json.loads(head), buffers
    except RecursionError:
        raise ProtocolError("value nested too deeply (in the message's JSON)") from None
    except ValueError as e:
        raise ProtocolError(f"the header is not JSON ({type(e).__name__}: {e})") from None


def dumps(value: Any) -> bytes:
    """``value`` as one message, by value only (a handle is refused with ``TypeError``)."""
    def refuse(obj: Any):
        raise TypeError(f"cannot send a {type(obj).__name__} as data")

    enc = Encoder("x", refuse)
    return pack(enc.encode(value), enc.buffers)


def loads(data: bytes, limits: Limits = LIMITS) -> Any:
    """The value :func:`dumps` wrote; :class:`ProtocolError` for anything else."""
    view, pos = memoryview(data), [0]

    def read_exact(n: int) -> bytes:
        if pos[0] + n > len(view):
            raise ProtocolError("not a value file: it ends too early")
        pos[0] += n
        return bytes(view[pos[0] - n:pos[0]])

    def no_handles(*_: Any):
        raise ProtocolError("a handle where data was expected")

    try:
        tree, buffers = read_frame(read_exact, limits)
    except struct.error as e:
        raise ProtocolError(f"not a value file: {e}") from None
    return Decoder("x", buffers, no_handles, limits=limits).decode(tree)


def accept_one(path: str, timeout: float):
    """Listen on the Unix socket ``path`` (open to every user: the peer may run as another
    one) for one connection, within ``timeout`` seconds; the listening socket and its path
    are gone before this returns. The connection blocks (no timeout)."""
    import os
    import socket

    # bound under a name of its own, opened to every user and listening before it is renamed
    # to ``path``: a peer never finds ``path`` with the umask's mode (a judge of another uid
    # would be refused) or not yet listening
    from grader import unixsock     # (a path of any length: a long TMPDIR's too)

    folder, name = os.path.split(path)
    staging = os.path.join(folder, f".{name}~")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        unixsock.bind(srv, staging)
        os.chmod(staging, 0o666)
        srv.listen(1)
        os.rename(staging, path)
        srv.settimeout(timeout)
        conn, _ = srv.accept()
    finally:
        srv.close()
        for p in (staging, path):
            try:
                os.unlink(p)
            except OSError:
                pass
    conn.settimeout(None)
    return conn


def socket_reader(sock) -> Callable[[int], bytes]:
    """``read_exact(n)`` on a stream socket (``EOFError`` when the other side closed it)."""
    def read_exact(n: int) -> bytes:
        chunks, left = [], n
        while left:
            got = sock.recv(min(left, 1 << 20))
            if not got:
                raise EOFError("the other side closed the connection")
            chunks.append(got)
            left -= len(got)
        return b"".join(chunks)
    return read_exact


def send_value(sock, value: Any) -> None:
    """Send ``value`` (data only, as :func:`dumps`) as one message on a stream socket."""
    sock.sendall(dumps(value))


def recv_value(sock, limits: Limits = LIMITS) -> Any:
    """The next message on a stream socket, decoded as data only (no handles)."""
    def no_handles(*_: Any):
        raise ProtocolError("a handle where data was expected")

    tree, buffers = read_frame(socket_reader(sock), limits)
    return Decoder("x", buffers, no_handles, limits=limits).decode(tree)
