"""The alpha-beta model of ring collectives, and its fit to timed collectives.

On ``p`` ranks, for a tensor of ``n`` bytes (the full, unsplit size):

- all-reduce: ``2(p-1)`` steps, each rank sends ``2(p-1)/p * n`` bytes;
- all-gather and reduce-scatter: ``p-1`` steps, ``(p-1)/p * n`` bytes;
- broadcast (pipelined along a ring, or one broadcast of ``n/p`` bytes from each rank,
  as ZeRO-1 sends the parts it updated): ``p-1`` steps, ``(p-1)/p * n`` bytes.

Time = steps * latency + bytes sent / bandwidth (latency "alpha" per step, one over the
bandwidth "beta" per byte). :func:`fit_alpha_beta` finds the latency and bandwidth that
best explain a sweep of timed collectives, of any mix of operations and group sizes, by
least squares on the relative error (a 4 KiB and a 4 MiB collective weigh the same).

A sweep timed on a busy machine can fail to grow with the size (every collective waiting
for ranks that are not running): then no bandwidth explains it. The fit does not raise
(a page never fails because the machine was noisy): it keeps the latency alone, with an
infinite bandwidth, and says so in :attr:`LinkFit.problem`, a sentence the page prints.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["OPS", "ring_steps", "ring_bytes", "collective_time", "LinkFit", "fit_alpha_beta",
           "fit_link"]

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}: use one of {OPS}")


def ring_steps(op: str, p: int) -> int:
    _check_op(op)
    return 0 if p <= 1 else (2 if op == "all_reduce" else 1) * (p - 1)


def ring_bytes(op: str, size: float, p: int) -> float:
    """Bytes one rank sends in a ring ``op`` on a tensor of ``size`` bytes over ``p`` ranks."""
    _check_op(op)
    if p <= 1:
        return 0.0
    return (2 if op == "all_reduce" else 1) * (p - 1) / p * size


def collective_time(op: str, size: float, p: int, bandwidth: float, latency: float) -> float:
    return ring_steps(op, p) * latency + ring_bytes(op, size, p) / bandwidth


@dataclass
class LinkFit:
    """A fitted link and how well it explains what it was fitted to."""

    latency: float
    bandwidth: float
    samples: list[tuple[str, int, float, float]] = field(default_factory=list)
    problem: str = ""        # why the sweep could not give a bandwidth ("" when it did)

    @property
    def ok(self) -> bool:
        """Whether the sweep gave both a latency and a bandwidth."""
        return not self.problem

    def predict(self, op: str, p: int, size: float) -> float:
        return collective_time(op, size, p, self.bandwidth, self.latency)

    @property
    def relative_errors(self) -> list[float]:
        """(predicted - measured) / measured for each sample."""
        return [(self.predict(op, p, n) - t) / t for op, p, n, t in self.samples]

    @property
    def median_abs_error(self) -> float:
        errs = sorted(abs(e) for e in self.relative_errors)
        if not errs:
            return math.nan
        mid = len(errs) // 2
        return errs[mid] if len(errs) % 2 else (errs[mid - 1] + errs[mid]) / 2


def fit_alpha_beta(samples) -> LinkFit:
    """Latency (s per step) and bandwidth (bytes/s) fitted to ``[(op, p, bytes, seconds),
    ...]`` by least squares on relative errors: minimise the sum of
    ``((steps*alpha + sent*beta - t) / t)**2``. Both come out non-negative: a negative
    latency (the data can ask for one) is pinned at zero and the bandwidth refitted. A
    sweep that does not get slower as it grows gets the latency alone (``problem`` says
    why, from the figures); two samples at least are needed."""
    rows = []
    for op, p, n, t in samples:
        if t <= 0:
            raise ValueError(f"a measured time must be positive: {op} on {p} ranks, "
                             f"{n} bytes took {t} s")
        rows.append((ring_steps(op, p) / t, ring_bytes(op, n, p) / t))
    if len(rows) < 2:
        raise ValueError(f"need at least two timed collectives to fit, got {len(rows)}")
    # normal equations of   sum (a_i * alpha + b_i * beta - 1)^2
    saa = sum(a * a for a, _ in rows)
    sbb = sum(b * b for _, b in rows)
    sab = sum(a * b for a, b in rows)
    sa = sum(a for a, _ in rows)
    sb = sum(b for _, b in rows)
    det = saa * sbb - sab * sab
    alpha = (sa * sbb - sb * sab) / det if det else -1.0
    beta = (saa * sb - sab * sa) / det if det else -1.0
    if alpha < 0 or not det:
        alpha, beta = 0.0, sb / sbb
    kept = [tuple(s) for s in samples]
    if beta <= 0 or not math.isfinite(beta):
        return LinkFit(sa / saa if saa else 0.0, math.inf, kept, _no_growth(kept))
    return LinkFit(alpha, 1 / beta, kept)


def _no_growth(samples) -> str:
    """Why a sweep gave no bandwidth, in the sweep's own figures."""
    sizes = sorted({n for _, _, n, _ in samples})
    times = [t for *_, t in samples]
    return (f"the {len(samples)} timed collectives did not get slower as they grew "
            f"({fmt_size(sizes[0])} to {fmt_size(sizes[-1])} took {min(times) * 1e3:.2g} to "
            f"{max(times) * 1e3:.2g} ms, in no order of size), so no bandwidth explains "
            "them: the machine was too busy for this sweep, and the link keeps only a "
            "latency (each collective priced at its steps' latency)")


def fmt_size(n: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def fit_link(samples, p: int = 2) -> tuple[float, float]:
    """(latency, bandwidth) fitted to all-reduces over ``p`` ranks, ``[(bytes, s), ...]``."""
    fit = fit_alpha_beta([("all_reduce", p, n, t) for n, t in samples])
    return fit.latency, fit.bandwidth
