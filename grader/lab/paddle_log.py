"""Reading what Paddle's reshard functions logged, section by section.

The chapter's Paddle scripts switch on the log of Paddle's reshard functions (glog level
4 for ``*_reshard_function.cc``), which then write one line per step of a reshard, e.g.::

    I1130 17:04:48.329141 13681 s_to_r_reshard_function.cc:47] Call `AllGather` in Resharding on CPU.

and print their own marker lines (``== <what follows>``) before each part of the work.
:func:`sections` cuts a rank's log (``<log_dir>/workerlog.<rank>``) at those markers;
:func:`collectives` counts, per section, the calls that are collectives (the others,
``Slice``, ``Split``, ``Concat``..., are local). Nothing is inferred: these are the lines
Paddle wrote.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

__all__ = ["COLLECTIVES", "sections", "collectives", "reshard_lines"]

COLLECTIVES = {"AllGather": "all_gather", "AllReduce": "all_reduce",
               "ReduceScatter": "reduce_scatter", "AllToAll": "all_to_all"}
_CALL = re.compile(r"(\w+_reshard_function)\.cc:\d+\] Call `(\w+)` in Resharding")
_GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ ")


def reshard_lines(path: str | Path) -> list[str]:
    """The marker lines and the reshard functions' lines of one rank's log, without
    glog's date and thread prefix."""
    text = Path(path).read_text(errors="replace")
    out = []
    for line in text.splitlines():
        if line.startswith("== ") or _CALL.search(line):
            out.append(_GLOG_PREFIX.sub("", line))
    return out


def sections(path: str | Path) -> dict[str, list[tuple[str, str]]]:
    """``{marker: [(reshard function, call), ...]}`` in the order the log has them. A
    marker seen twice keeps its first section (the scripts mark only their first step)."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in reshard_lines(path):
        if line.startswith("== "):
            name = line[3:].strip()
            current = out.setdefault(name, []) if name not in out else None
            continue
        m = _CALL.search(line)
        if m and current is not None:
            current.append((m.group(1), m.group(2)))
    return out


def collectives(path: str | Path) -> dict[str, dict[str, int]]:
    """``{marker: {collective: count}}``: only the calls that communicate, named as the
    planner names them (``all_gather``, ``all_reduce``, ...)."""
    return {name: dict(Counter(COLLECTIVES[call] for _, call in calls
                               if call in COLLECTIVES))
            for name, calls in sections(path).items()}
