"""Intervals per device or stream, recorded by the run itself, drawn as a chart, with the
overlap computed as a number to print beside it.

Times are seconds on one clock. CPU workers and the host share ``perf_counter`` (Linux's
CLOCK_MONOTONIC is system-wide); GPU intervals come from device events anchored to it.
A profiler's Chrome trace (``torch.profiler``, ``paddle.profiler``) is read with
:meth:`Timeline.from_chrome_trace`, on the trace's own clock.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from grader.wire import value_type

__all__ = ["Interval", "Timeline", "COLORS"]

COLORS = {"compute": "#4C72B0", "copy": "#DD8452", "comm": "#55A868", "other": "#8C8C8C"}

# Chrome-trace categories of torch.profiler and paddle.profiler, by what they are.
_TRACE_KINDS = {"kernel": "compute", "Kernel": "compute", "cpu_op": "compute",
                "Operator": "compute", "gpu_memcpy": "copy", "Memcpy": "copy",
                "gpu_memset": "copy", "Memset": "copy"}


@value_type
@dataclass(frozen=True)
class Interval:
    row: str
    start: float
    end: float
    kind: str = "compute"
    label: str = ""

    @property
    def duration(self) -> float:
        return self.end - self.start


def _merge(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


@value_type
@dataclass
class Timeline:
    title: str = ""
    intervals: list[Interval] = field(default_factory=list)

    # -- building ---------------------------------------------------------------
    def add(self, row: str, start: float, end: float, kind: str = "compute", label: str = "") -> None:
        if end < start:
            raise ValueError(f"interval on {row!r} ends ({end}) before it starts ({start})")
        self.intervals.append(Interval(row, start, end, kind, label))

    def add_records(self, row: str, records: Iterable[Any], kinds: Iterable[str] | None = None) -> None:
        """Add ``TaskRecord``s (nanosecond clocks) from a device or worker."""
        keep = set(kinds) if kinds else None
        for r in records:
            if keep is None or r.kind in keep:
                self.add(row, r.start_ns / 1e9, r.end_ns / 1e9, r.kind, r.label)

    @classmethod
    def from_devices(cls, devices: Iterable[Any], title: str = "", since_ns: int = 0) -> "Timeline":
        tl = cls(title)
        for d in devices:
            tl.add_records(str(d), [r for r in d.records if r.start_ns >= since_ns])
        return tl

    @classmethod
    def from_chrome_trace(cls, trace: Any, title: str = "",
                          rows: dict[str, str] | None = None,
                          kinds: dict[str, str] | None = None) -> "Timeline":
        """A profiler's Chrome trace (``torch.profiler``'s ``export_chrome_trace``,
        ``paddle.profiler``'s ``export``): a path, a JSON string or the parsed dict.

        Every complete event (``"ph": "X"``, start ``ts`` and duration ``dur`` in
        microseconds) whose category is a key of ``rows`` becomes an interval on the row
        ``rows[category]``; with ``rows=None`` each category is its own row. ``kinds``
        colours a category (``"compute"``, ``"copy"``, ``"comm"``, ``"other"``); GPU
        kernels and memory copies of both profilers are recognised without it. Nested
        events (an operator and the operators it calls) share their row. Times are
        seconds since the first event drawn (the trace's own clock, not ``perf_counter``).
        """
        if isinstance(trace, (str, Path)) and not str(trace).lstrip().startswith("{"):
            trace = json.loads(Path(trace).read_text())
        elif isinstance(trace, str):
            trace = json.loads(trace)
        events = trace.get("traceEvents", []) if isinstance(trace, dict) else list(trace)
        complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
                    and "ts" in e and e.get("cat") is not None]
        if rows is None:
            rows = {c: c for c in dict.fromkeys(e["cat"] for e in complete)}
        missing = [c for c in rows if not any(e["cat"] == c for e in complete)]
        if len(missing) == len(rows):
            found = sorted({str(e["cat"]) for e in complete})
            raise ValueError(f"the trace has no complete events of {sorted(rows)}; "
                             f"its categories are {found or 'none'}")
        kinds = {**_TRACE_KINDS, **(kinds or {})}
        chosen = sorted((e for e in complete if e["cat"] in rows), key=lambda e: float(e["ts"]))
        # Profilers stamp microseconds since some epoch: in seconds those need more digits
        # than a float has, so times are kept relative to the first event drawn.
        base = float(chosen[0]["ts"])
        tl = cls(title)
        for e in chosen:
            start = (float(e["ts"]) - base) * 1e-6
            # paddle.profiler appends the duration to a name: "matmul dygraph[1.2 ms]"
            name = re.sub(r"\[[\d.]+ [mun]?s\]$", "", str(e.get("name", "")))
            tl.add(rows[e["cat"]], start, start + float(e.get("dur", 0.0)) * 1e-6,
                   kinds.get(e["cat"], "other"), name)
        return tl

    @classmethod
    def from_events(cls, marks: Iterable[tuple], origin: Any, title: str = "") -> "Timeline":
        """From device events (PyTorch's or Paddle's CUDA events, created with
        ``enable_timing=True`` and synchronized): ``marks`` are ``(row, start_event,
        end_event)`` or ``(row, start_event, end_event, kind, label)``; every time is
        ``origin.elapsed_time(event)``, milliseconds after the ``origin`` event."""
        tl = cls(title)
        for mark in marks:
            row, a, b, *rest = mark
            kind = rest[0] if rest else "compute"
            label = rest[1] if len(rest) > 1 else ""
            t0 = float(origin.elapsed_time(a)) / 1e3
            t1 = float(origin.elapsed_time(b)) / 1e3
            tl.add(row, t0, max(t0, t1), kind, label)
        return tl

    # -- reading ----------------------------------------------------------------
    @property
    def rows(self) -> list[str]:
        seen: dict[str, None] = {}
        for i in self.intervals:
            seen.setdefault(i.row, None)
        return list(seen)

    def start(self) -> float:
        return min(i.start for i in self.intervals)

    def end(self) -> float:
        return max(i.end for i in self.intervals)

    def span(self) -> float:
        return self.end() - self.start() if self.intervals else 0.0

    def busy(self, row: str, kinds: Iterable[str] | None = None) -> list[tuple[float, float]]:
        keep = set(kinds) if kinds else None
        return _merge((i.start, i.end) for i in self.intervals
                      if i.row == row and (keep is None or i.kind in keep))

    def busy_time(self, row: str, kinds: Iterable[str] | None = None) -> float:
        return sum(e - s for s, e in self.busy(row, kinds))

    def overlap(self, row_a: str, row_b: str, kinds_a: Iterable[str] | None = None,
                kinds_b: Iterable[str] | None = None) -> float:
        """Seconds during which both rows (or both kinds within one row) were busy."""
        a, b = self.busy(row_a, kinds_a), self.busy(row_b, kinds_b)
        total, i, j = 0.0, 0, 0
        while i < len(a) and j < len(b):
            lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
            if hi > lo:
                total += hi - lo
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return total

    def summary(self) -> str:
        lines = [f"{self.title or 'timeline'}: span {self.span() * 1e3:.1f} ms"]
        for r in self.rows:
            lines.append(f"  {r:<14} busy {self.busy_time(r) * 1e3:8.1f} ms")
        return "\n".join(lines)

    # -- drawing ----------------------------------------------------------------
    def plot(self, ax: Any = None, unit: str = "ms", annotate: str | None = None,
             labels: bool = False) -> Any:
        """Draw one row per device or stream; compute, copy and communication in their
        colours. ``labels=True`` writes each interval's label on it where it fits."""
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch

        scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
        if ax is None:
            _, ax = plt.subplots(figsize=(8, 0.6 + 0.55 * max(1, len(self.rows))))
        t0 = self.start() if self.intervals else 0.0
        span = self.span() or 1.0
        rows = self.rows
        for y, row in enumerate(rows):
            outer_end = float("-inf")  # label only intervals not nested in an earlier one
            for iv in sorted((i for i in self.intervals if i.row == row),
                             key=lambda i: (i.start, -i.end)):
                ax.broken_barh([((iv.start - t0) * scale, max(iv.duration * scale, 1e-9))],
                               (y - 0.35, 0.7), facecolors=COLORS.get(iv.kind, COLORS["other"]),
                               edgecolor="white", linewidth=0.5)
                fits = int(100 * iv.duration / span)  # about 100 small characters per axis
                nested, outer_end = iv.end <= outer_end, max(outer_end, iv.end)
                if labels and iv.label and fits >= 4 and not nested:
                    text = iv.label if len(iv.label) <= fits else iv.label[:fits - 1] + "…"
                    ax.text((iv.start - t0 + iv.duration / 2) * scale, y, text,
                            ha="center", va="center", fontsize="x-small", color="white",
                            clip_on=True)
        ax.set_yticks(range(len(rows)), rows)
        ax.invert_yaxis()
        ax.set_xlabel(f"time ({unit})")
        kinds = sorted({i.kind for i in self.intervals})
        # Outside the axes, right of the rows: never on top of the title or the bars.
        ax.legend(handles=[Patch(color=COLORS.get(k, COLORS["other"]), label=k) for k in kinds],
                  loc="upper left", fontsize="small", frameon=False, bbox_to_anchor=(1.01, 1.0))
        title = self.title + (f"\n{annotate}" if annotate else "")
        if title:
            ax.set_title(title, fontsize="medium", loc="left")
        ax.figure.tight_layout()
        return ax
