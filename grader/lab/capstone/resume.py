"""Resumed runs, read back: a layout trained from a checkpoint that another launch (or
another layout, on another number of ranks) saved, against the run that saved it.

Where the layout is the one that saved, the resumed losses must be the uninterrupted
run's to the last bit: the same ranks add up the same numbers in the same order, from
the same state. Where it is another layout, they may differ by reordered sums only:
within the page's tolerance (:data:`~.parity.TOLERANCE`), as any two layouts do.
"""
from __future__ import annotations

from dataclasses import dataclass

from .parity import TOLERANCE, worst_relative


@dataclass(frozen=True)
class ResumeRow:
    layout: str              # the layout that resumed, "RxSxTxP"
    ranks: int
    saved_layout: str        # the layout that saved the checkpoint
    saved_ranks: int
    start: int               # the step it resumed at (the data's position)
    off_saver: float | None  # largest relative difference from the saving run's losses
    #                          (None: the saving run is not in the records given)
    lr_carried: bool | None  # each step's rate is the saving run's at that step
    off_alone: float         # largest relative difference from one process's losses
    load_s: float

    @property
    def same_layout(self) -> bool:
        return (self.layout, self.ranks) == (self.saved_layout, self.saved_ranks)

    @property
    def continues(self) -> bool:
        """The resumed losses continue the saving run's: identical in the same layout,
        within the tolerance in another."""
        if self.off_saver is None or not self.lr_carried:
            return False
        return self.off_saver == 0.0 if self.same_layout else self.off_saver <= TOLERANCE


def why_not(row: ResumeRow) -> str:
    """Why a resumed run does not continue the saving run's (empty where it does)."""
    if row.continues:
        return ""
    if row.off_saver is None:
        return "the run that saved is not in the records"
    if not row.lr_carried:
        return "its learning rates are not the saving run's"
    return f"its losses differ from the saving run's by up to {row.off_saver:.1e}"


def savers(records: list[dict]) -> dict[tuple[str, int], dict]:
    """The runs that started from step 0 (not controls), by (layout, ranks)."""
    return {(r["layout"], rec["world"]): r for rec in records for r in rec["runs"]
            if not r.get("start") and not r.get("control")}


def resumes(records: list[dict]) -> list[ResumeRow]:
    """One row per resumed run in ``records``, each against the run in ``records``
    that saved its checkpoint (the saving launch's record must be among them)."""
    by = savers(records)
    rows = []
    for rec in records:
        for r in rec["runs"]:
            if not r.get("resumed"):
                continue
            saved, start = r["resumed"]["saved_by"], r["start"]
            saver = by.get((saved["layout"], saved["ranks"]))
            off = lr = None
            if saver:
                off = worst_relative(r["losses"], saver["losses"][start:])
                lr = r.get("lr") == saver.get("lr", [])[start:] and bool(r.get("lr"))
            rows.append(ResumeRow(r["layout"], rec["world"], saved["layout"],
                                  saved["ranks"], start, off, lr,
                                  worst_relative(r["losses"], rec["reference"][start:]),
                                  r["resumed"]["load_s"]))
    return rows


def resume_table(rows: list[ResumeRow]) -> str:
    lines = [f"{'saved by':18} {'resumed as':18} {'at step':>7} {'off the saving run':>19}"
             f" {'load s':>7}"]
    def ranks(n: int) -> str:
        return f"({n} rank{'s' if n != 1 else ''})"

    for r in rows:
        off = "not found" if r.off_saver is None else \
            "identical" if r.off_saver == 0.0 else f"{r.off_saver:.1e}"
        lines.append(f"{r.saved_layout + ' ' + ranks(r.saved_ranks):18} "
                     f"{r.layout + ' ' + ranks(r.ranks):18} {r.start:7} {off:>19} "
                     f"{r.load_s:7.2f}")
    return "\n".join(lines)


def resume_words(rows: list[ResumeRow]) -> str:
    """The sentence on the resumed runs, for whatever they measured."""
    if not rows:
        return "no run resumed"
    same = [r for r in rows if r.same_layout]
    other = [r for r in rows if not r.same_layout]
    words = []
    if same:
        ok = [r for r in same if r.continues]
        words.append(f"{len(ok)} of the {len(same)} runs resumed in the layout that "
                     "saved continue its losses bit for bit" if len(same) > 1 else
                     "the run resumed in the layout that saved " +
                     ("continues its losses bit for bit" if ok else
                      f"does not continue them: {why_not(same[0])}"))
    if other:
        ok = [r for r in other if r.continues]
        worst = max((r.off_saver for r in other if r.off_saver is not None), default=0.0)
        words.append(f"{len(ok)} of the {len(other)} runs resumed in another layout "
                     f"continue them within {TOLERANCE:.0e} (largest relative "
                     f"difference {worst:.1e})")
    if any(not r.lr_carried for r in rows):
        words.append("the learning rate of some resumed run is not the saving run's")
    return "; ".join(words)


def save_times(records: list[dict]) -> list[tuple[str, bool, float, float]]:
    """(layout, asynchronous, seconds the training stopped for, seconds until the
    checkpoint was committed) of every save in ``records``."""
    return [(r["layout"], bool(r.get("async_save")), stopped, total)
            for rec in records for r in rec["runs"] for stopped, total in r.get("save_s", [])]


def elastic_lines(result: dict) -> str:
    """A recorded restart (a slow test's): what each attempt did, and the losses of the
    steps both ran, beside one process's."""
    first, second = result["attempts"]
    (run,) = result["runs"]
    last = first[-1][0]
    lines = [f"attempt 1: steps {first[0][0]}-{last}; rank {result['world'] - 1} killed "
             f"(SIGKILL) while saving step {last + 1}",
             f"the launcher saw: {'; '.join(result['launcher'])}"]
    for s in run["skipped"]:
        lines.append(f"attempt 2: passed over {s['name']} (" +
                     ("all its files written, " if s["metadata"] else "") +
                     "never committed)")
    lines.append(f"attempt 2: resumed from {run['resumed']['from'].split('/')[-1]}, "
                 f"steps {second[0][0]}-{second[-1][0]}")
    ref = result["reference"]
    again = dict(second)
    lines.append(f"{'step':>4} {'attempt 1':>12} {'attempt 2':>12} {'one process':>12}")
    for step, loss in first:
        if step in again:
            lines.append(f"{step:4} {loss:12.8f} {again[step]:12.8f} {ref[step]:12.8f}")
    worst = worst_relative([loss for _, loss in first[:second[0][0]] + second], ref)
    lines.append(f"the whole curve, attempt 1 then 2: at most {worst:.1e} off one process")
    return "\n".join(lines)
