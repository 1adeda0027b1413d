"""How `make test` shares its two test processes (pytest-xdist: ``-n 2 --dist loadgroup``).

- **A module is one unit of work**, run whole by one process, so each module fixture is made
  once, as in a run in one process.
- **Modules that read one expensive session fixture are one unit**: every module using
  ``built_book`` (the executed book: two processes building one ``_build`` at once would
  break it) is one unit, and every module using ``hostile_class`` (a graded class) another,
  so that each fixture is made once in the whole run, as the fixtures' docstrings promise.
- **The longest units start first**, by the seconds last recorded for each module in
  ``tests/durations.json``, so that the two processes finish at about the same time
  (a module not recorded there starts after the recorded ones). The record is only an
  order: a stale or missing one makes the run slower, never wrong. Rewrite it from a
  JUnit report of a whole run with ``python -m tests.groups REPORT.xml``.

Without xdist (``pytest tests/...``, one process) nothing here changes the order.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DURATIONS = HERE / "durations.json"
# session fixtures that must be made once per run, whatever process a module lands in
ONCE_PER_RUN = ("built_book", "hostile_class")


def wanted(config: pytest.Config) -> bool:
    """Whether this run shares its tests out by group (``--dist loadgroup``). Asked in each
    xdist worker, where the tests are collected: xdist sets a worker's ``dist`` option to
    "no" and its own ``loadgroup`` option instead (only the controller, which collects
    nothing, keeps ``dist``)."""
    return bool(getattr(config.option, "loadgroup", False)) or \
        config.getoption("dist", "no") == "loadgroup"


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def unit_names(items: list[pytest.Item]) -> dict[str, str]:
    """module -> the unit it runs in: the ONCE_PER_RUN fixture it uses, else itself."""
    units = {}
    for item in items:
        mod = module_of(item)
        shared = next((f for f in ONCE_PER_RUN if f in getattr(item, "fixturenames", ())), None)
        if shared is not None:
            units[mod] = shared
        else:
            units.setdefault(mod, mod)
    return units


def recorded() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.get("modules", {}).items()}


def assign(items: list[pytest.Item], seconds: dict[str, float] | None = None) -> None:
    """Mark every item with its unit (``xdist_group``) and put the longest units first
    (stable: the modules and tests of a unit keep their order)."""
    seconds = recorded() if seconds is None else seconds
    units = unit_names(items)
    weight: dict[str, float] = defaultdict(float)
    for mod, unit in units.items():
        weight[unit] += seconds.get(mod, 0.0)
    for item in items:
        if not any(True for _ in item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(units[module_of(item)]))
        _name_group(item)
    first = {}
    for i, item in enumerate(items):
        first.setdefault(units[module_of(item)], i)
    items.sort(key=lambda it: (-weight[units[module_of(it)]], first[units[module_of(it)]]))


def _name_group(item: pytest.Item) -> None:
    """Append ``@<group>`` to the test's node id, which is what xdist's loadgroup scheduler
    reads. xdist 3.8 does it in its workers by setting ``item._nodeid``, which pytest 9.2's
    nodes no longer read (their node id is ``str(item._id)``, a ``NodeId``): without this
    every test was its own unit, each module was split between the two processes, and both
    built the book at once. Done once, whatever xdist does after (a scope is the text after
    the last ``@``)."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:        # a pytest whose nodes still read what xdist sets
        return
    nodeid = getattr(item, "nodeid", "")
    if not isinstance(getattr(item, "_id", None), NodeId) or "@" in nodeid.rpartition("]")[2]:
        return
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    item._id = NodeId.parse(f"{nodeid}@{'_'.join(names)}")


def from_junit(report: Path) -> dict[str, float]:
    """Seconds per test module (setup, call and teardown) from a JUnit XML report."""
    import xml.etree.ElementTree as ET

    out: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        mod = case.get("classname", "").split(".")
        # classname is the dotted module (and class) path: find where the module ends
        for n in range(len(mod), 0, -1):
            path = Path(*mod[:n]).with_suffix(".py")
            if (HERE.parent / path).is_file():
                out[path.as_posix()] += float(case.get("time") or 0.0)
                break
    return dict(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.groups REPORT.xml  (a JUnit report of a whole run)",
              file=sys.stderr)
        return 2
    mods = from_junit(Path(argv[0]))
    if not mods:
        print(f"{argv[0]}: no test cases of this suite in it", file=sys.stderr)
        return 1
    DURATIONS.write_text(json.dumps(
        {"about": "seconds per module of one whole run; only orders the units of `make test` "
                  "(tests/groups.py)",
         "modules": {k: round(v, 1) for k, v in sorted(mods.items())}}, indent=1) + "\n")
    print(f"{DURATIONS}: {len(mods)} modules, {sum(mods.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
