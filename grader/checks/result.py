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

    def __post_init__(self) -> None:
        if not 0 <= self.points <= self.max_points:
            raise ValueError(f"{self.name}: points {self.points} outside 0..{self.max_points}")

    @property
    def passed(self) -> bool:
        return self.points == self.max_points

    def text(self) -> str:
        lines = [f"[{'PASS' if self.passed else 'FAIL'}] {self.name}: "
                 f"{self.points:g}/{self.max_points:g} - {self.message}"]
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


@dataclass(frozen=True)
class PublicResult:
    """What a public check returns: feedback on the notebook's own example, worth no points,
    so its text shows no points either (a "1/1" there read as a grade). ``public()`` prints
    it and fails the cell when it did not pass, as it does with a :class:`CheckResult`,
    unless ``stops`` is false: an answer that runs but misses the example is told so, and
    the graded checks in the same cell still run (else the cell would score 0, and a
    mistake would lose more than its points)."""
    name: str
    passed: bool
    message: str
    expected: str = ""
    seen: str = ""
    hint: str = ""
    stops: bool = True

    @classmethod
    def of(cls, r: CheckResult) -> "PublicResult":
        return cls(r.name, r.passed, r.message, r.expected, r.seen, r.hint)

    def text(self) -> str:
        lines = [f"[{'PASS' if self.passed else 'FAIL'}] {self.name} (not graded) - "
                 f"{self.message}"]
        if not self.passed:
            lines += [f"  {k}: {' ' * (8 - len(k))}{v}" for k, v in
                      (("expected", self.expected), ("seen", self.seen), ("hint", self.hint))
                      if v]
            if not self.stops:
                lines.append("  (not graded: the graded checks still run when the "
                             "notebook is graded)")
        return "\n".join(lines)

    __str__ = text

    def _repr_html_(self) -> str:
        color = "#1a7f37" if self.passed else "#cf222e"
        rows = "".join(
            f"<tr><th style='text-align:left;padding-right:1em'>{k}</th><td>{html.escape(v)}</td></tr>"
            for k, v in (("expected", self.expected), ("seen", self.seen), ("hint", self.hint))
            if v and not self.passed)
        return (f"<div style='border-left:4px solid {color};padding:.3em .8em;margin:.3em 0'>"
                f"<b>{html.escape(self.name)}</b> (not graded) &mdash; "
                f"{html.escape(self.message)}<table>{rows}</table></div>")
