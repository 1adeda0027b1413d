"""The wire format: how values cross between processes that do not trust each other.

One message is a JSON tree plus raw byte buffers, framed as ``!IQ`` (buffer count, header
length), the header, then each buffer as ``!Q`` length + bytes (:func:`pack`,
:func:`read_frame`). The grading judge and a student's kernel speak it over a socket
(:mod:`grader.grading.judge.channel`); a rank process that runs student code returns its result in
it (:func:`dumps` / :func:`loads`, :func:`grader.lab.core.launch.launch`), and an a7 rank talks to
its relay in it (:mod:`grader.ranks.relay`). Decoding builds only:

- ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``;
- ``list``, ``tuple``, ``dict``, ``set``, ``frozenset`` (recursively; aliasing and cycles
  through lists and dicts are kept: the same object twice decodes to one object);
- NumPy arrays and scalars of bool, integer, float and complex dtypes (raw bytes + dtype +
  shape, never pickle, never object dtype);
- PyTorch / Paddle tensors (rebuilt from such an array, framework, dtype, requires-grad);
- the course's plain value types: dataclasses that registered themselves with
  :func:`value_type` (``@value_type`` above the class), rebuilt from their fields;
- a torch tensor sharing storage with one the receiver sent (``x.detach()``) as a view of
  the receiver's tensor (checked against its storage's bounds);
- everything else as a *handle*: a number naming an object that stays on its side, for
  which the receiver's ``handle`` callback gives a proxy.

Decoding never runs code that the tree names: no pickle, no constructor the sender picks
(only registered value types; a name not registered yet is looked up by importing its
module only inside ``grader.lab`` and ``grader.checks``, the course's own libraries).

And it is bounded (:class:`Limits`): the header's and the buffers' size, the number of
values, the nesting, the seconds one message may take, and how many distinct values may
share one hash. That last one stops hash-collision payloads (say 50,000 integers that are
multiples of ``2**61 - 1``, all hashing to 0): as dict keys or set elements, or later in a
check's ``set(...)``, they cost quadratic time in C, holding the GIL. A message over a limit
raises :class:`ProtocolError` with the limit's name, which the receiver reports.

Inside: :mod:`.limits` (the bounds), :mod:`.values` (value types, tensors), :mod:`.codec`
(:class:`Encoder`, :class:`Decoder`), :mod:`.frames` (framing and the data-only helpers).
"""
from __future__ import annotations

from .codec import Decoder, Encoder
from .frames import (accept_one, dumps, loads, pack, read_frame, recv_value, send_value,
                     socket_reader)
from .limits import LIMITS, Limits, ProtocolError
from .values import array_of, tensor_framework, value_type

__all__ = ["accept_one", "Limits", "LIMITS", "ProtocolError", "Encoder", "Decoder", "pack", "read_frame",
           "dumps", "loads", "socket_reader", "send_value", "recv_value", "value_type",
           "tensor_framework", "array_of"]
