"""The page's sentences, chosen from the runs' numbers: why a measured bubble departs
from its formula (the stages' measured times replayed, then what they leave), and how
the schedules compare as measured."""
from __future__ import annotations

from .measure import ScheduleRow

__all__ = ["departure", "compare", "versus"]


def departure(row: ScheduleRow) -> str:
    """Why ``row``'s measured bubble is not its formula's: the unequal stages (their
    measured pass times, replayed in the run's order) and what remains beyond them."""
    stages = row.stage_times()
    slow, fast = max(stages, key=stages.get), min(stages, key=stages.get)
    lines = [f"{row.schedule} with {row.micro} micro-batches: one micro-batch's passes "
             f"took {stages[fast] * 1e3:.1f} ms on stage {fast} and "
             f"{stages[slow] * 1e3:.1f} ms on stage {slow}, the slowest "
             f"({stages[slow] / stages[fast]:.1f} times the fastest)."]
    unequal = row.unequal - row.formula
    if unequal > 0.005:
        lines.append(f"Replayed in the run's order on these times, with free "
                     f"transfers, the ranks idle {row.unequal:.0%} of the step against "
                     f"{row.formula:.0%} on equal stages: the unequal stages account "
                     f"for {100 * unequal:.0f} percentage points.")
    else:
        lines.append(f"Replayed in the run's order on these times the ranks idle "
                     f"{row.unequal:.0%}, as on equal stages ({row.formula:.0%}): the "
                     "unequal stages cost this order nothing measurable.")
    rest = row.bubble - row.unequal
    if rest > 0.005:
        lines.append(f"The measured {row.bubble:.0%} leaves {100 * rest:.0f} points "
                     "that the stages' compute times and the order do not explain: "
                     "time "
                     "between the timed passes (sends and receives, the schedule's own "
                     "work) and the other processes on this machine's cores, which the "
                     "page does not time apart.")
    else:
        lines.append(f"The measured {row.bubble:.0%} is no more than that replay: the "
                     "transfers added no idle time this run could see.")
    return " ".join(lines)


def versus(a: ScheduleRow, b: ScheduleRow) -> str:
    """How schedule ``a``'s measured bubble compares with ``b``'s: lower or higher only
    where the ranges of their timed steps do not overlap."""
    if max(a.bubbles) < min(b.bubbles):
        word = "less than"
    elif min(a.bubbles) > max(b.bubbles):
        word = "more than"
    else:
        word = "within the timed steps' spread of"
    return (f"{a.schedule} idled {a.bubble:.0%} of its step, {word} {b.schedule}'s "
            f"{b.bubble:.0%} (formulas: {a.formula:.0%} and {b.formula:.0%})")


def compare(rows: list[ScheduleRow], micro: int) -> str:
    """The schedules with ``micro`` micro-batches: the least and most idle as measured,
    against the order the formulas give."""
    mine = [r for r in rows if r.micro == micro]
    if len(mine) < 2:
        return f"Fewer than two schedules ran with {micro} micro-batches."
    by_formula = sorted(mine, key=lambda r: r.formula)
    by_measure = sorted(mine, key=lambda r: r.bubble)
    # the formulas' order holds where every schedule the formulas put lower measured less
    same = all(a.bubble < b.bubble for a in mine for b in mine if a.formula < b.formula)
    least, most = by_measure[0], by_measure[-1]
    text = (f"With {micro} micro-batches the least idle schedule measured was "
            f"{least.schedule} ({least.bubble:.0%}), the most idle {most.schedule} "
            f"({most.bubble:.0%}); ")
    if same:
        return text + "the measured order is the formulas' order."
    first = [r.schedule for r in mine if r.formula == by_formula[0].formula]
    last = [r.schedule for r in mine if r.formula == by_formula[-1].formula]
    low, high = by_formula[0].formula, by_formula[-1].formula
    return text + (f"the formulas put {_names(first)} first ({low:.0%})"
                   f" and {_names(last)} last ({high:.0%}): on this "
                   "machine what the formulas leave out (the stages' unequal times, "
                   "the time between passes) decides the order.")


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
