"""The bounds of one message (:mod:`grader.wire`), and the error a message over one raises."""
from __future__ import annotations

import dataclasses

__all__ = ["Limits", "LIMITS", "ProtocolError"]


@dataclasses.dataclass(frozen=True)
class Limits:
    header_bytes: int = 8 * 2**20      # the JSON tree of one message
    buffer_bytes: int = 256 * 2**20    # the arrays and bytes of one message, together
    buffers: int = 100_000             # how many buffers one message may carry
    nodes: int = 1_000_000             # values in one message
    depth: int = 64                    # nesting of containers
    seconds: float = 10.0              # decoding one message
    same_hash: int = 256               # distinct values of one message sharing a hash
    digits: int = 4300                 # decimal digits of one integer


LIMITS = Limits()


class ProtocolError(Exception):
    """A message that does not follow the protocol, or is over a limit."""
