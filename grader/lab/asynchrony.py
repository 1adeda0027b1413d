"""Chores of the chapter on asynchronous execution (``chapters/async.md``).

The chapter's experiments are written in the frameworks' own API in its cells; this
module only does what is not the lesson:

- :func:`threads_verdict` and :func:`clock_verdict` choose the sentence that interprets
  a measured figure from the figure itself, so the text never contradicts its numbers;
- :func:`top_level` and :func:`ran_in_order` read operators out of a profiler's Chrome
  trace; :func:`say` glues a computed sentence into the page's prose.
"""
from __future__ import annotations

import statistics
from typing import Iterable, Sequence

__all__ = ["threads_verdict", "clock_verdict", "top_level", "ran_in_order", "say"]


# --- sentences chosen by the figures --------------------------------------------------

def threads_verdict(speedup: float, cores: int, load: float | None = None) -> str:
    """What ``speedup`` (all ``cores`` threads against one, for one operator) shows."""
    if cores <= 1:
        return ("This machine gives the process a single core, so there is nothing to "
                "spread one operator over.")
    busy = (load is not None and load > cores)
    if speedup >= 0.75 * cores:
        return (f"One operator already uses every core: with {cores} threads it ran "
                f"{speedup:.2f} times as fast as with one (ideal {cores}).")
    if speedup >= 1.2:
        return (f"One operator spread over the cores, though not perfectly: {speedup:.2f} "
                f"times as fast with {cores} threads as with one (ideal {cores})"
                + ("; other programs held some of the cores (the load average is above "
                   "the number of cores)." if busy else "."))
    why = ("the load average above the number of cores says other programs held some "
           "of them, so this run cannot tell what one operator gets from every core"
           if busy else
           "the load average was not above the number of cores, which rules out other "
           "programs holding them throughout, though not short bursts between its "
           "samples; what else held the threads back this run did not measure")
    if speedup < 1.0:
        return (f"On this run the extra threads did not help: one product was slower with "
                f"{cores} threads than with one ({speedup:.2f} times the one-thread "
                f"speed): {why}.")
    return (f"On this run the extra threads barely helped ({speedup:.2f} times the "
            f"one-thread speed): {why}.")


def clock_verdict(cold_s: float, unsynced_s: float, synced_s: Sequence[float]) -> str:
    """What the three clocks of the same work show: the cold first call (synchronized),
    a warm call read without synchronizing, and the warm synchronized repeats."""
    if not synced_s:
        raise ValueError("need at least one synchronized warm repeat")
    med, lo, hi = statistics.median(synced_s), min(synced_s), max(synced_s)
    parts = []
    if unsynced_s < 0.5 * med:
        parts.append(f"Without a synchronize the clock read {unsynced_s * 1e3:.2f} ms: "
                     f"the time to queue the work, {med / unsynced_s:.0f} "
                     f"times less than the {med * 1e3:.1f} ms it took.")
    else:
        parts.append(f"Without a synchronize the clock read {unsynced_s * 1e3:.2f} ms "
                     f"against {med * 1e3:.1f} ms with one: on this run "
                     "queuing the work took about as long as doing it, which says the "
                     "machine was busy, not that the clock is right.")
    if cold_s > 1.2 * med and cold_s > hi:
        parts.append(f"The cold first call took {cold_s * 1e3:.1f} ms, "
                     f"{cold_s / med:.1f} times a warm one and more than the slowest "
                     "warm one: one-off set-up costs that a warm-up keeps out of the "
                     "measurement.")
    elif cold_s > hi:
        parts.append(f"The cold first call ({cold_s * 1e3:.1f} ms) was slower than every "
                     f"warm one ({lo * 1e3:.1f}-{hi * 1e3:.1f} ms), but only "
                     f"{cold_s / med:.2f} times their median: whether that is a set-up "
                     "cost or other programs' noise, one run cannot tell.")
    elif cold_s >= lo:
        parts.append(f"The cold first call ({cold_s * 1e3:.1f} ms) was within the spread "
                     f"of the warm ones ({lo * 1e3:.1f}-{hi * 1e3:.1f} ms) here: its "
                     "set-up cost was small next to the work, or hidden by other "
                     "programs' noise.")
    else:
        parts.append(f"The cold first call ({cold_s * 1e3:.1f} ms) was even faster than "
                     f"the fastest warm one ({lo * 1e3:.1f} ms): its set-up "
                     "cost was too small to see, and other programs on this shared "
                     "machine slowed some warm repeats; that is why the median of "
                     "several repeats is reported, never one run.")
    return " ".join(parts)


# --- reading a profiler's Chrome trace ------------------------------------------------

def top_level(events: Iterable[dict], category: str) -> list[dict]:
    """Complete events (``"ph": "X"``) of ``category`` that no other such event on the
    same thread contains, in start order: the operators the program called, without the
    ones they called in turn (``aten::matmul`` without the ``aten::mm`` inside it)."""
    evs = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == category),
                 key=lambda e: (str(e.get("tid")), float(e["ts"]), -float(e.get("dur", 0))))
    out: list[dict] = []
    open_end: dict[str, float] = {}
    for e in evs:
        tid = str(e.get("tid"))
        start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
        if tid in open_end and start < open_end[tid]:
            continue  # inside an operator already kept
        out.append(e)
        open_end[tid] = end
    return sorted(out, key=lambda e: float(e["ts"]))


def ran_in_order(ops: Sequence[dict]) -> bool:
    """True when each of ``ops`` (in start order) started after the previous one ended."""
    return all(float(b["ts"]) >= float(a["ts"]) + float(a.get("dur", 0)) - 1e-3
               for a, b in zip(ops, ops[1:]))


def say(key: str, sentence: str) -> None:
    """Glue ``sentence`` (Markdown) into the page's prose as ``{glue:md}`key```.

    Outside a Jupyter build (``make gpu-check``'s plain Python) there is no page to glue
    into: nothing happens."""
    try:
        from IPython.display import Markdown
        from myst_nb import glue
    except ImportError:
        return
    glue(key, Markdown(sentence), display=False)
