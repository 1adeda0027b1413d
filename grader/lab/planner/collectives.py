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
    latency (the data can ask for one) is pinned at zero and the bandwidth refitted."""
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
    if beta <= 0:
        raise ValueError("the timed collectives do not get slower as they grow; no "
                         f"bandwidth fits them: {samples}")
    return LinkFit(alpha, 1 / beta, [tuple(s) for s in samples])


def fit_link(samples, p: int = 2) -> tuple[float, float]:
    """(latency, bandwidth) fitted to all-reduces over ``p`` ranks, ``[(bytes, s), ...]``."""
    fit = fit_alpha_beta([("all_reduce", p, n, t) for n, t in samples])
    return fit.latency, fit.bandwidth
