"""Chores of the chapter on asynchronous execution (``chapters/async.md``).

The chapter's experiments are written in the frameworks' own API in its cells; this
module only does what is not the lesson:

- :func:`portable` lets a function defined in a notebook cell travel to a CPU worker
  process (the stand-in for a GPU's queue when the machine has none): pickle sends
  functions by name, and a cell's functions have no importable name;
- :func:`threads_verdict` and :func:`clock_verdict` choose the sentence that interprets
  a measured figure from the figure itself, so the text never contradicts its numbers;
- :func:`top_level` and :func:`ran_in_order` read operators out of a profiler's Chrome
  trace; :func:`say` glues a computed sentence into the page's prose.
"""
from __future__ import annotations

import builtins
import importlib
import marshal
import types
from typing import Any, Callable, Iterable, Sequence

__all__ = ["portable", "Portable", "threads_verdict", "clock_verdict", "top_level",
           "ran_in_order", "say"]


def _rebuild(name: str, code: bytes, modules: dict[str, str], values: dict[str, Any],
             defaults: tuple | None) -> types.FunctionType:
    glob: dict[str, Any] = {"__builtins__": builtins, "__name__": "__portable__"}
    for alias, module in modules.items():
        glob[alias] = importlib.import_module(module)
    glob.update(values)
    fn = types.FunctionType(marshal.loads(code), glob, name, defaults)
    return fn


class Portable:
    """A function that pickles by value: its code, the modules it names and the plain
    values it reads (see :func:`portable`). Calling it calls the function."""

    def __init__(self, fn: Callable) -> None:
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"portable() takes a plain function (def ...), not {fn!r}")
        code = fn.__code__
        if code.co_freevars:
            raise TypeError(
                f"{fn.__name__} reads variables of an enclosing function "
                f"({', '.join(code.co_freevars)}): define it at the top level of a cell, "
                "taking what it needs as arguments")
        modules: dict[str, str] = {}
        values: dict[str, Any] = {}
        for name in _global_names(code):
            if name not in fn.__globals__:
                continue  # a builtin, or a name that is not defined yet (fails when called)
            value = fn.__globals__[name]
            if isinstance(value, types.ModuleType):
                modules[name] = value.__name__
            elif isinstance(value, (int, float, str, bool, bytes, tuple, type(None))):
                values[name] = value
            else:
                raise TypeError(
                    f"{fn.__name__} reads the global {name!r} ({type(value).__name__}); "
                    "only modules and plain numbers or strings travel with it: pass "
                    f"{name!r} as an argument instead")
        self.fn, self._modules, self._values = fn, modules, values
        self.__name__ = fn.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __reduce__(self):
        return (_rebuild, (self.fn.__name__, marshal.dumps(self.fn.__code__), self._modules,
                           self._values, self.fn.__defaults__))

    def __repr__(self) -> str:
        return f"portable({self.fn.__name__})"


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:  # comprehensions and lambdas inside the function
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def portable(fn: Callable) -> Portable:
    """Wrap ``fn`` (defined in a notebook cell) so that a CPU worker process can run it.

    The worker runs the same Python (the same interpreter), so the function's code object
    travels as it is; the modules it names (``torch``, ``paddle``, ``time``) are imported
    there, and plain global numbers or strings go along. Anything else it reads must be
    an argument: the error says which name.
    """
    return Portable(fn)


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
    why = ("the load average above the number of cores says other programs held them, "
           "and a thread that waits for a descheduled partner can make two threads no "
           "faster than one" if busy else
           "the product was too small to share, or the cores were taken by other "
           "programs between the load average's samples")
    if speedup < 1.0:
        return (f"On this run the extra threads did not help: one product was slower with "
                f"{cores} threads than with one ({speedup:.2f} times the one-thread "
                f"speed): {why}.")
    return (f"On this run the extra threads barely helped ({speedup:.2f} times the "
            f"one-thread speed): {why}.")


def clock_verdict(cold_s: float, unsynced_s: float, synced_median_s: float,
                  synced_min_s: float) -> str:
    """What the three clocks of the same work show (cold, not synchronized, warm)."""
    parts = []
    if unsynced_s < 0.5 * synced_median_s:
        parts.append(f"Without a synchronize the clock read {unsynced_s * 1e3:.2f} ms: "
                     f"the time to queue the work, {synced_median_s / unsynced_s:.0f} "
                     f"times less than the {synced_median_s * 1e3:.1f} ms it took.")
    else:
        parts.append(f"Without a synchronize the clock read {unsynced_s * 1e3:.2f} ms "
                     f"against {synced_median_s * 1e3:.1f} ms with one: on this run "
                     "queuing the work took about as long as doing it, which says the "
                     "machine was busy, not that the clock is right.")
    if cold_s > 1.2 * synced_median_s:
        parts.append(f"The cold first call took {cold_s * 1e3:.1f} ms, "
                     f"{cold_s / synced_median_s:.1f} times a warm one: one-off set-up "
                     "costs that a warm-up keeps out of the measurement.")
    elif cold_s >= synced_min_s:
        parts.append(f"The cold first call ({cold_s * 1e3:.1f} ms) was within the spread "
                     "of the warm ones here: its set-up cost was small next to the work, "
                     "or hidden by other programs' noise.")
    else:
        parts.append(f"The cold first call ({cold_s * 1e3:.1f} ms) was even faster than "
                     f"the fastest warm one ({synced_min_s * 1e3:.1f} ms): its set-up "
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
