"""The sentences the fitting chapter's measurements choose: each takes the numbers the
page measured and returns words that are true of them (tested in tests/lab/fitting/)."""
from __future__ import annotations

import statistics

__all__ = ["agreement", "recompute_sentence", "precision_sentence"]


def agreement(measured: float, predicted: float) -> str:
    """How a measured count stands to a prediction, in words."""
    if measured == predicted:
        return "exactly as predicted"
    rel = (measured - predicted) / predicted
    side = "more" if rel > 0 else "less"
    return f"{abs(rel):.1%} {side} than predicted"


def recompute_sentence(mode: str, saved: float, saved_none: float,
                       times: list[float], times_none: list[float]) -> str:
    """What recomputing (``mode``) saved and cost, from the bytes counted and the
    interleaved step times of the same run. A difference that the repeats' ranges
    cannot separate is said to be so, not called a cost."""
    kept = saved / saved_none
    med, base = statistics.median(times), statistics.median(times_none)
    change = med / base - 1
    words = (f"{mode} recomputation keeps {kept:.0%} of the saved bytes "
             f"({saved_none / 2**20:.2f} to {saved / 2**20:.2f} MiB), and its step took ")
    timing = (f"{med * 1e3:.1f} ms against {base * 1e3:.1f} ms (medians of "
              f"{len(times)} interleaved repeats)")
    overlap = min(times) <= max(times_none) and min(times_none) <= max(times)
    if overlap:
        return words + timing + ": the repeats' ranges overlap, so this run cannot tell " \
                                "its cost from noise"
    return words + timing + f", {abs(change):.0%} {'longer' if change > 0 else 'shorter'}"


def precision_sentence(reference: list[float], other: list[float], name: str) -> str:
    """How far ``name``'s losses stayed from FP32's on the same batches."""
    if len(reference) != len(other) or not reference:
        raise ValueError("compare losses of the same steps")
    diffs = [abs(a - b) for a, b in zip(reference, other)]
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    rel = diffs[worst] / abs(reference[worst])
    if max(diffs) == 0:
        return f"{name} gave the same losses as FP32 at every one of the {len(diffs)} steps"
    return (f"over {len(diffs)} steps {name}'s loss stayed within {max(diffs):.2g} of "
            f"FP32's (at most {rel:.2%} of it, at step {worst + 1}); the last losses are "
            f"{reference[-1]:.3f} (FP32) and {other[-1]:.3f} ({name})")
