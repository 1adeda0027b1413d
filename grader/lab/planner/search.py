"""The search: every strategy the cost model can price, the fastest that fits, and how
well a predicted order matches a measured one."""
from __future__ import annotations

import math

import itertools

from .cluster import Cluster, with_devices
from .cost import Prediction, Strategy, predict
from .layouts import PLACEMENTS

__all__ = ["enumerate_strategies", "best_strategy", "rank_correlation"]


def enumerate_strategies(dims: list[int], batch: int, n: int):
    """Every (dp, tp, placements) with dp*tp == n that divides the batch and the split
    dimensions. With tp == 1 only all-replicated placements make sense."""
    layers = len(dims) - 1
    for tp in range(1, n + 1):
        if n % tp:
            continue
        dp = n // tp
        if batch % dp:
            continue
        choices = [("R",) * layers] if tp == 1 else itertools.product(PLACEMENTS, repeat=layers)
        for pl in choices:
            ok = all(p == "R" or (dims[k + 1] if p == "col" else dims[k]) % tp == 0
                     for k, p in enumerate(pl))
            if ok:
                yield Strategy(dp, tp, tuple(pl))


def best_strategy(dims: list[int], batch: int, cluster: Cluster, itemsize: int = 4,
                  opt_states: int = 0, dp_sync: str = "fused"
                  ) -> tuple[Prediction, list[Prediction]]:
    """The fastest strategy that fits in memory, and every prediction, best first.

    A strategy may use fewer of the cluster's devices (any number that divides it): where
    communication costs more than it saves, the fastest plan leaves devices out rather than
    have every device of a tensor-parallel group repeat the same work (a ``tp > 1`` plan
    that splits no layer is that, and is not listed). ``Prediction.devices`` says how many
    a plan uses."""
    preds = []
    for m in (d for d in range(1, cluster.n + 1) if cluster.n % d == 0):
        on = cluster if m == cluster.n else with_devices(cluster, m)
        preds += [predict(dims, batch, s, on, itemsize, opt_states, dp_sync)
                  for s in enumerate_strategies(dims, batch, m)
                  if s.tp == 1 or any(x != "R" for x in s.placements)]
    if not preds:
        raise ValueError(f"no strategy splits batch {batch} and dims {dims} over {cluster.n}")
    # ties go to the simpler strategy: fewer devices, then less tensor parallelism
    preds.sort(key=lambda p: (not p.fits, round(p.step_s, 12), p.devices, p.strategy.tp,
                              sum(x != "R" for x in p.strategy.placements)))
    return preds[0], preds


def _ranks(values) -> list[float]:
    """Ranks 1..n, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def rank_correlation(predicted, measured) -> float:
    """Spearman's rank correlation: 1 when both order the strategies alike, -1 when one
    is the other reversed; NaN when one list has all values equal (no order to compare,
    which a noisy measurement can give: the caller words it, nothing raises)."""
    if len(predicted) != len(measured) or len(predicted) < 2:
        raise ValueError("need two lists of the same length, at least 2 long")
    a, b = _ranks(list(predicted)), _ranks(list(measured))
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    var = (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
    if var == 0:
        return math.nan
    return cov / var
