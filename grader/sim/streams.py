"""Streams, events and the context managers that change the current stream, as both
simulated frameworks spell them (``torch.cuda.Stream`` / ``paddle.device.Stream``, ...).

A facade (:mod:`.torch_api`, :mod:`.paddle_api`) provides ``_stream(obj_or_None)``,
``_event(obj)``, ``_m`` (the machine) and ``_names`` (how it spells these classes in
messages). Public attributes are the framework's own; nothing here reveals durations.
"""
from __future__ import annotations

from typing import Any

from .engine import Event, SimError, Stream

__all__ = ["SimStream", "SimEvent", "StreamContext", "NullContext", "unmodeled", "wrap_stream"]


def wrap_stream(fw: Any, stream: Stream) -> "SimStream":
    """The one :class:`SimStream` of ``stream`` (so that ``is`` and ``==`` agree, through
    the grading channel too, where objects compare by identity)."""
    cache = fw.__dict__.setdefault("_stream_objects", {})
    if id(stream) not in cache:
        cache[id(stream)] = (stream, SimStream(fw, stream))
    return cache[id(stream)][1]


def unmodeled(fw: Any, what: str, name: str, modeled: str) -> AttributeError:
    return AttributeError(f"the simulated {fw._FW} does not model {what}.{name}; it models "
                          f"{modeled}")


class SimStream:
    """A stream of one simulated device."""

    def __init__(self, fw: Any, stream: Stream) -> None:
        self._fw, self._s = fw, stream

    @property
    def device(self) -> Any:
        return self._fw._device_object(self._s.gpu.index)

    @property
    def priority(self) -> int:
        return self._s.priority

    def synchronize(self) -> None:
        self._s.synchronize()

    def query(self) -> bool:
        return self._s.query()

    def wait_event(self, event: Any) -> None:
        self._s.wait_until(self._fw._event(event).time_ns)

    def wait_stream(self, stream: Any) -> None:
        self._s.wait_until(self._fw._stream(stream).done_ns())

    def record_event(self, event: Any = None) -> "SimEvent":
        event = event if event is not None else SimEvent(self._fw, False)
        event.record(self)
        return event

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, SimStream) and other._s is self._s

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return (f"<{self._fw._names['Stream']} device={self._fw._device_text(self._s.gpu.index)}"
                f" number={self._s.number}>")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise unmodeled(self._fw, self._fw._names["Stream"], name,
                        "synchronize, query, wait_event, wait_stream, record_event, device")


class SimEvent:
    """A device event; ``elapsed_time`` in milliseconds, as both frameworks give it."""

    def __init__(self, fw: Any, enable_timing: bool) -> None:
        self._fw, self._e = fw, Event(fw._m, enable_timing)

    def record(self, stream: Any = None) -> None:
        self._e.record(self._fw._stream(stream))

    def synchronize(self) -> None:
        self._e.synchronize()

    def query(self) -> bool:
        return self._e.query()

    def wait(self, stream: Any = None) -> None:
        self._fw._stream(stream).wait_until(self._e.time_ns)

    def elapsed_time(self, end_event: Any) -> float:
        end = self._fw._event(end_event)
        self._fw._m.elapsed_calls += 1
        if not (self._e.enable_timing and end.enable_timing):
            raise SimError("Both events must be created with argument 'enable_timing=True'.")
        if self._e.time_ns is None or end.time_ns is None:
            raise SimError("Both events must be recorded before calculating elapsed time.")
        if not (self._e.query() and end.query()):
            raise SimError("CUDA error: device not ready (elapsed_time needs both events to "
                           "have completed: wait for the end event with "
                           f"end_event.synchronize() or {self._fw._names['synchronize']}() "
                           "first)")
        return (end.time_ns - self._e.time_ns) / 1e6

    def __repr__(self) -> str:
        return f"<{self._fw._names['Event']}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise unmodeled(self._fw, self._fw._names["Event"], name,
                        "record, synchronize, query, wait, elapsed_time")


class StreamContext:
    """What ``torch.cuda.stream(s)`` / ``paddle.device.stream_guard(s)`` (and a device
    guard) return: the block runs with ``s`` as its device's current stream (and that device
    as the current one)."""

    __judge_ops__ = frozenset({"enter", "exit"})

    def __init__(self, fw: Any, stream: Stream | None, device: int | None = None) -> None:
        self._fw, self._stream, self._device = fw, stream, device
        self._saved: list = []

    def __enter__(self) -> Any:
        m = self._fw._m
        dev = self._stream.gpu.index if self._stream is not None else self._device
        self._saved.append((m.current_device, m.gpus[dev].current if dev is not None else None))
        if dev is not None:
            m.current_device = dev
        if self._stream is not None:
            self._stream.gpu.current = self._stream
        return None

    def __exit__(self, *exc: Any) -> bool:
        if not self._saved:
            raise SimError("this context was exited more often than it was entered")
        device, stream = self._saved.pop()
        if self._stream is not None:
            self._stream.gpu.current = stream
        self._fw._m.current_device = device
        return False


class NullContext:
    """``torch.no_grad()`` and the like: nothing to simulate."""

    __judge_ops__ = frozenset({"enter", "exit"})

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __call__(self, fn: Any) -> Any:   # also usable as a decorator
        return fn
