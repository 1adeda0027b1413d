"""The typed result every check returns, shown in the notebook and turned into points.

A check is one small function with a fixed signature that returns a :class:`CheckResult`.
Its message says what was expected, what was seen and, when points were lost, a hint.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CheckResult:
    name: str
    points: float
    max_points: float
    message: str
    expected: str = ""
    seen: str = ""
    hint: str = ""
    details: tuple[str, ...] = field(default_factory=tuple)
    # A public check's finding about an answer that runs but differs from the notebook's own
    # example: shown as FAIL on stdout, so that it does not fail the cell under nbgrader's
    # validate. (No public result stops its cell: support.public prints any other failure
    # to stderr in a kernel, and the hidden tests below it always run when graded.)
    advisory: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.points <= self.max_points:
            raise ValueError(f"{self.name}: points {self.points} outside 0..{self.max_points}")

    @property
    def passed(self) -> bool:
        return self.points == self.max_points

    def text(self, points: bool = True) -> str:
        """What a student reads; ``points=False`` for a public check, whose result counts
        for nothing (the graded tests decide the points)."""
        score = f"{self.points:g}/{self.max_points:g} - " if points else ""
        lines = [f"[{'PASS' if self.passed else 'FAIL'}] {self.name}: {score}{self.message}"]
        if not self.passed:
            if self.expected:
                lines.append(f"  expected: {self.expected}")
            if self.seen:
                lines.append(f"  seen:     {self.seen}")
            if self.hint:
                lines.append(f"  hint:     {self.hint}")
        lines += [f"  {d}" for d in self.details]
        return "\n".join(lines)

    __str__ = text

    def _repr_html_(self) -> str:
        color = "#1a7f37" if self.passed else ("#9a6700" if self.points else "#cf222e")
        rows = "".join(
            f"<tr><th style='text-align:left;padding-right:1em'>{k}</th><td>{html.escape(v)}</td></tr>"
            for k, v in (("expected", self.expected), ("seen", self.seen), ("hint", self.hint))
            if v and not self.passed)
        return (f"<div style='border-left:4px solid {color};padding:.3em .8em;margin:.3em 0'>"
                f"<b>{html.escape(self.name)}</b>: {self.points:g}/{self.max_points:g} &mdash; "
                f"{html.escape(self.message)}<table>{rows}</table></div>")


def total(results: list[CheckResult]) -> tuple[float, float]:
    return sum(r.points for r in results), sum(r.max_points for r in results)
