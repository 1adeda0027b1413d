"""The planner beside PyTorch's accounting, per layout: memory per rank by kind and the
collectives of a step, the disagreements past :data:`TOLERANCE`, the depth the tracker
could not afford scaled by the planner (labelled so), and whether the layout fits a
device of :data:`DEVICE_BYTES`.

Two planner columns: :mod:`~grader.lab.planner.sharded`'s general model (``_memory``,
``step_collectives``), and :mod:`~grader.lab.planner.composed`'s corrected one for the
capstone's functions, written after this comparison showed where the first was wrong.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from grader.lab.capstone.tables import OP
from grader.lab.planner import composed
from grader.lab.planner.composed import Layout
from grader.lab.planner.sharded import Transformer, _memory, step_collectives

from .fake import KINDS, Tracked, track

__all__ = ["LLAMA3_8B", "LAYOUTS", "TOLERANCE", "DEVICE_BYTES", "Row", "compare",
           "memory_table", "collectives_table", "disagreements", "fit_table",
           "recorded_rows", "recorded_match"]

# Llama-3-8B's sizes in the planner's GPT family (a 4x MLP, not Llama's 3.5x SwiGLU;
# 7.5 billion values), float32 and Adam as the capstone trains, 64 sequences of 2048
# tokens per step (Llama 3 trains at 8192: this model writes its attention out, whose
# scores grow with the square of the sequence)
LLAMA3_8B = Transformer(vocab=128256, width=4096, heads=32, blocks=32, seq=2048,
                        batch=64, itemsize=4, opt_states=2)
LAYOUTS = ("1x64x1x1", "8x1x8x1", "1x64x8x1", "8x8x8x1", "1x32x8x2")
TOLERANCE = 0.10
DEVICE_BYTES = 80 * 2**30          # an 80 GB GPU (A100/H100), as the planner's presets


@dataclass
class Row:
    layout: Layout
    tracked: Tracked
    general: dict[str, float]      # sharded._memory of the tracked depth
    planner: dict[str, float]      # composed.memory_terms of the tracked depth
    ops_tracked: Counter
    ops_general: Counter | None    # None: not comparable (a pipeline's stage alone)
    ops_planner: Counter
    full_planner: float            # each kind at its own peak, added, at the whole depth
    full_tracked: float            # the tracker's peak, depth scaled by the planner


def _counter(pairs) -> Counter:
    return Counter(OP.get(op, op) for op, *_ in pairs)


def compare(layout: Layout, model: Transformer = LLAMA3_8B, blocks: int = 2) -> Row:
    """Track ``layout`` with ``blocks`` of ``model``'s blocks, price it both ways."""
    tracked = track(layout, model, blocks=blocks)
    small = tracked.model
    micro = tracked.in_flight
    general = _memory(small, layout.plan())
    planner = composed.memory_terms(small, layout)
    ops_general = None if layout.pp > 1 else _counter(step_collectives(small, layout.plan()))
    # the tracked stage sends nothing to a next stage: the planner's sends left out
    ops_planner = _counter(op for op in composed.step_collectives(small, layout, micro=micro)
                           if op[1] != "pp")
    whole = composed.memory_terms(model, layout)
    # the tracker's peak at the model's depth: what the tracked depth measured, plus
    # what the planner says the other blocks add (a prediction, labelled so)
    added = sum(whole.values()) - sum(planner.values())
    return Row(layout, tracked, general, planner, _counter(tracked.collectives),
               ops_general, ops_planner, sum(whole.values()),
               tracked.peak + max(added, 0.0))


def _gib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**30:7.2f}"


def memory_table(rows: list[Row]) -> str:
    """GiB per rank by kind: the tracker (each kind at its own peak), the corrected
    planner, and the general one; a ``!`` marks a planner figure off by more than the
    tolerance."""
    lines = [f"{'layout':9} {'kind':12} {'tracker':>8} {'planner':>8} {'':2}"
             f"{'sharded.py':>10} {'':2}"]
    for r in rows:
        for i, kind in enumerate(KINDS):
            t = r.tracked.memory[kind]
            p, g = r.planner.get(kind), r.general.get(kind)

            def mark(x):
                return "" if x is None and not t else \
                    ("!" if x is None or abs(x - t) > TOLERANCE * t else "")
            lines.append(f"{r.layout.text if i == 0 else '':9} {kind:12} {_gib(t):>8} "
                         f"{_gib(p):>8} {mark(p):2}{_gib(g):>10} {mark(g):2}")
    return "\n".join(lines)


def _ops(c: Counter | None) -> str:
    if c is None:
        return "(not compared: a stage alone is not the schedule)"
    return ", ".join(f"{n} {op}" for op, n in sorted(c.items())) or "none"


def collectives_table(rows: list[Row]) -> str:
    lines = [f"{'layout':9} collectives of rank 0 in the tracked step"]
    for r in rows:
        same = "equal" if r.ops_planner == r.ops_tracked else "DIFFER"
        lines += [f"{r.layout.text:9} tracker:    {_ops(r.ops_tracked)}",
                  f"{'':9} planner:    {_ops(r.ops_planner)}  ({same})",
                  f"{'':9} sharded.py: {_ops(r.ops_general)}"]
    return "\n".join(lines)


def disagreements(row: Row, planner: str = "planner") -> list[tuple[str, float, float]]:
    """(kind, tracker's bytes, planner's bytes) for every kind off by more than the
    tolerance; ``planner`` is "planner" (corrected) or "general" (sharded.py)."""
    figures = row.planner if planner == "planner" else row.general
    out = []
    for kind in KINDS:
        t, p = row.tracked.memory[kind], figures.get(kind, 0.0)
        if abs(p - t) > TOLERANCE * max(t, 1):
            out.append((kind, t, p))
    return out


def fit_table(rows: list[Row]) -> str:
    """GiB per rank at the model's whole depth, by the planner and by the tracker's
    peak with the untracked blocks added by the planner, against an 80 GB device."""
    gib = 2**30
    yes = {True: "fits", False: "does not fit"}
    lines = [f"{'layout':9} {'axes':34} {'planner':>8} {'tracker+':>9}   in 80 GiB"]
    for r in rows:
        p, t = r.full_planner, r.full_tracked
        verdict = yes[t <= DEVICE_BYTES] if (p <= DEVICE_BYTES) == (t <= DEVICE_BYTES) \
            else f"planner: {yes[p <= DEVICE_BYTES]}, tracker+: {yes[t <= DEVICE_BYTES]}"
        lines.append(f"{r.layout.text:9} {str(r.layout):34} {p / gib:8.1f} {t / gib:9.1f}"
                     f"   {verdict}")
    return "\n".join(lines)


def _recorded(record: dict | None) -> list[tuple[Layout, Counter, Counter]]:
    """(layout, measured, corrected planner) for each layout of a recorded capstone run
    (what chapters/scripts/capstone_torch.py wrote), at the run's own sizes."""
    if record is None:
        return []
    from grader.lab.capstone.tables import measured_ops, model_of

    result = record["result"]
    model = model_of(result)
    out = []
    for run in result["runs"]:
        if run.get("control") or run.get("resumed"):
            continue
        layout = Layout.parse(run["layout"], micro=result["sizes"]["micro"])
        out.append((layout, measured_ops(run),
                    _counter(composed.step_collectives(model, layout))))
    return out


def recorded_rows(record: dict | None) -> list[str]:
    """Lines for the page: each recorded layout's counts, measured and planned."""
    lines = []
    for layout, measured, planned in _recorded(record):
        same = "equal" if measured == planned else "DIFFER"
        lines += [f"{layout.text:9} gloo ranks: {_ops(measured)}",
                  f"{'':9} planner:    {_ops(planned)}  ({same})"]
    return lines


def recorded_match(record: dict | None) -> bool | None:
    """Whether every recorded layout's counts equal the planner's (None: no record)."""
    rows = _recorded(record)
    return None if not rows else all(m == p for _, m, p in rows)
