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

__all__ = ["COLLECTIVES", "sections", "collectives", "reshard_lines", "script_output"]

COLLECTIVES = {"AllGather": "all_gather", "AllReduce": "all_reduce",
               "ReduceScatter": "reduce_scatter", "AllToAll": "all_to_all"}
_CALL = re.compile(r"(\w+_reshard_function)\.cc:\d+\] Call `(\w+)` in Resharding")
_GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ ")


# what a rank's log holds besides the script's own output: glog lines, Python warnings
# (and the source line each one quotes), Paddle's logger, its "Modified FLAGS" banner
_NOT_THE_SCRIPT = re.compile(
    r"^([IWEF]\d{4} [\d:.]+|\[\d{4}-\d\d-\d\d |(INFO|WARNING|ERROR) \d{4}-\d\d-\d\d|"
    r"=+( Modified FLAGS detected =+)?$|FLAGS\(name=|== |\s+warnings\.warn\()"
    r"|^\S+\.py:\d+: \w*Warning: ")


def script_output(path: str | Path) -> str:
    """What the script itself printed to one rank's log (the launcher puts the rank's
    stdout and stderr there), without Paddle's and Python's log and warning lines, and
    without the script's own marker lines."""
    text = Path(path).read_text(errors="replace")
    return "\n".join(line for line in text.splitlines()
                     if line.strip() and not _NOT_THE_SCRIPT.search(line))


def reshard_lines(path: str | Path, with_output: bool = True) -> list[str]:
    """The reshard functions' lines of one rank's log, without glog's date and thread
    prefix, with the script's marker lines and (``with_output``) its other output, in
    the order they were written."""
    text = Path(path).read_text(errors="replace")
    out = []
    for line in text.splitlines():
        if _CALL.search(line):
            out.append(_GLOG_PREFIX.sub("", line))
        elif line.startswith("== ") or (with_output and line.strip()
                                        and not _NOT_THE_SCRIPT.search(line)):
            out.append(line)
    return out


def sections(path: str | Path) -> dict[str, list[tuple[str, str]]]:
    """``{marker: [(reshard function, call), ...]}`` in the order the log has them. A
    marker seen twice keeps its first section (the scripts mark only their first step)."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in reshard_lines(path, with_output=False):
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
