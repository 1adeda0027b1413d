"""Chores of the chapter "Overlapping computation with communication"
(``chapters/communication.md``).

The experiments are framework code: GPU cells on the page, and two scripts the page
shows in full and starts with the frameworks' own launchers
(``chapters/scripts/comm_overlap_torch.py`` with ``torchrun``,
``chapters/scripts/comm_overlap_paddle.py`` with ``python -m paddle.distributed.launch``).
This module only does what is not the lesson:

- :func:`run_launcher` runs such a command from a cell (this environment's ``torchrun``
  or ``python``), and on failure raises with the end of its output;
- :func:`read_ranks` and :func:`comm_timelines` read the ranks' timestamps back and draw
  them; :func:`overlap_verdict` says in words what the figures show;
- :func:`training_step_graph` turns the backward graph a framework recorded (walked in
  the cell through ``grad_fn.next_functions``) into one data-parallel training step on
  two devices, and :func:`step_facts` reads what may run at the same time off it.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Iterable, Mapping, Sequence

import networkx as nx

from .core.notes import fit_width
from .core.timeline import Timeline

__all__ = ["LauncherFailed", "run_launcher", "read_ranks", "CommTimelines", "comm_timelines",
           "overlap_verdict", "training_step_graph", "step_facts"]


class LauncherFailed(RuntimeError):
    """The launcher (or one of its ranks) exited with an error; the message ends with
    the last lines it printed."""


def _resolve(cmd: Sequence[str]) -> list[str]:
    """``torchrun`` and ``python`` as this environment's own, even when it is not
    activated (a Jupyter kernel started from a virtual environment's full path)."""
    first, rest = cmd[0], list(cmd[1:])
    if first in ("python", "python3"):
        return [sys.executable, *rest]
    local = Path(sys.executable).with_name(first)
    if os.sep not in first and local.exists():
        return [str(local), *rest]
    if first == "torchrun":  # the same program, where no torchrun script is installed
        return [sys.executable, "-m", "torch.distributed.run", *rest]
    return [first, *rest]


def run_launcher(cmd: Sequence[str], *, env: Mapping[str, str] | None = None,
                 timeout: float = 300.0, cwd: str | None = None) -> str:
    """Run a launcher command as a reader would type it, print it, and return its output.

    ``env`` adds variables (for example ``OMP_NUM_THREADS``). A non-zero exit or a
    timeout raises :class:`LauncherFailed` with the last 30 lines of output.
    """
    print(fit_width("$ " + " ".join(f"{k}={v}" for k, v in (env or {}).items())
                    + (" " if env else "") + shlex.join(cmd)))   # to the page's width
    full_env = {**os.environ, **(env or {})}
    try:
        p = subprocess.run(_resolve(cmd), env=full_env, cwd=cwd, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or "") + (exc.stderr or "")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        raise LauncherFailed(f"{cmd[0]} still running after {timeout:.0f} s; stopped.\n"
                             + "\n".join(out.splitlines()[-30:])) from None
    out = p.stdout + p.stderr
    if p.returncode:
        raise LauncherFailed(f"{cmd[0]} exited with status {p.returncode}; its last lines:\n"
                             + "\n".join(out.splitlines()[-30:]))
    return out


def read_ranks(out_dir: str | os.PathLike, world: int | None = None) -> list[dict]:
    """Every ``rank<r>.json`` a script wrote into ``out_dir``, in rank order."""
    paths = sorted(Path(out_dir).glob("rank*.json"), key=lambda p: int(p.stem[4:]))
    ranks = [json.loads(p.read_text()) for p in paths]
    expected = world if world is not None else (ranks[0].get("world") if ranks else None)
    if not ranks or (expected is not None and len(ranks) != expected):
        raise FileNotFoundError(f"{out_dir} holds {len(ranks)} rank result(s), expected "
                                f"{expected or 'some'}: did every rank finish?")
    return ranks


@dataclass
class CommTimelines:
    sequential: Timeline
    overlapped: Timeline
    overlap_s: dict[str, float] = field(default_factory=dict)  # per rank, averaged


def comm_timelines(ranks: list[dict], label: str) -> CommTimelines:
    """One compute row and one communication row per rank, for each phase, from the
    records ``(phase, row, label, start_ns, end_ns)`` the ranks wrote."""
    tls = {p: Timeline(f"{label}: {p}") for p in ("sequential", "overlapped")}
    for res in ranks:
        for phase, row, lab, start, end in res["records"]:
            tls[phase].add(f"rank {res['rank']} {row}", start / 1e9, end / 1e9,
                           "compute" if row == "compute" else "comm", lab)
    out = CommTimelines(tls["sequential"], tls["overlapped"])
    for phase, tl in tls.items():
        out.overlap_s[phase] = sum(
            tl.overlap(f"rank {r['rank']} compute", f"rank {r['rank']} comm")
            for r in ranks) / len(ranks)
    return out


def overlap_verdict(ranks: list[dict], timelines: CommTimelines) -> str:
    """What the two phases' figures say, in one sentence chosen by them."""
    seq = max(r["sequential_s"] for r in ranks)
    ovl = max(r["overlapped_s"] for r in ranks)
    both_ms = timelines.overlap_s["overlapped"] * 1e3
    head = (f"overlapped / sequential = {ovl * 1e3:.0f} ms / {seq * 1e3:.0f} ms = "
            f"{ovl / seq:.2f} (each the slowest rank's own time); compute and "
            f"communication ran at the same time for {both_ms:.1f} ms per rank")
    if all(r.get("ran_inside_the_call") for r in ranks):
        return (head + ": every all-reduce had already finished when the call returned, "
                "so this backend ran it inside the call: there was nothing to overlap, and "
                "whatever separates the two times is not overlap")
    saved_ms = (seq - ovl) * 1e3
    cores = ("on CPUs the all-reduce competes for the cores with the products, and with "
             "every other program on the machine (the load line)")
    if both_ms > 0.5:
        if ovl < 0.95 * seq:
            # running side by side for both_ms can save at most both_ms (some slack for
            # the per-rank average against the slowest rank's times)
            if saved_ms <= 1.25 * both_ms + 1.0:
                return head + f": overlapping saved time ({saved_ms:.1f} ms)"
            return (head + f": overlapping can account for at most {both_ms:.1f} ms of "
                    f"the {saved_ms:.1f} ms the second run saved; the rest came from "
                    "different load from other programs (the load line)")
        if ovl < seq:
            return (head + f": they overlapped, but the run was only {saved_ms:.1f} ms "
                    f"({1 - ovl / seq:.0%}) faster: " + cores)
        return head + ": they overlapped, but the run was no faster: " + cores
    if ovl < 0.95 * seq:
        return (head + ": the second run was faster, but not because anything "
                "overlapped: the two runs saw different load from other programs (the "
                "load line)")
    return head + ": on this run the two did not overlap"


# -- one data-parallel training step, from the recorded backward graph -------------------

def _short(name: str) -> str:
    for suffix in ("Backward0", "Backward1", "GradNode", "Backward"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return name


def _wrap(text: str, width: int = 14) -> str:
    """Long CamelCase operation names on two lines: "fwd CrossEntropy\nWithSoftmax"."""
    if len(text) <= width:
        return text
    cut = max((i for i in range(1, len(text)) if text[i].isupper() and i <= len(text) - 4
               and text[i - 1] != " "), key=lambda i: -abs(i - len(text) / 2), default=None)
    return text if cut is None else text[:cut] + "\n" + text[cut:]


def training_step_graph(edges: Iterable[tuple[Hashable, Hashable | None]],
                        names: Mapping[Hashable, str], parameters: Iterable[str],
                        devices: Sequence[str] = ("gpu:0", "gpu:1"),
                        host: str = "cpu") -> nx.DiGraph:
    """One data-parallel step on ``devices``, driven from ``host``, built from the
    backward graph a framework recorded for the loss.

    ``edges`` are ``(node, next)`` pairs from walking ``grad_fn.next_functions``: ``node``
    hands gradients on to ``next`` (``None`` where an input needs no gradient: the
    batch or the labels). ``names`` gives each node's operation name, or the parameter's
    name for the nodes that write a parameter's gradient (listed in ``parameters``).

    Each backward node stands for the forward operation that recorded it, so the
    forward pass is the backward graph reversed: a forward operation runs after the
    operations whose outputs it reads. On each device: forward, then backward (each
    backward operation needs the gradient from the one before and the activations its
    forward operation kept), then one gradient per parameter; each parameter's
    gradients are summed over the link (all-reduce); each device then updates it.
    """
    params = set(parameters)
    # a parameter's gradient node passes nothing on (Paddle lists a None there)
    edges = [(a, b) for a, b in edges if names.get(a) not in params]
    if not edges:
        raise ValueError("no edges: walk loss.grad_fn.next_functions to get them")
    unknown = {k for e in edges for k in e if k is not None and k not in names}
    if unknown:
        raise ValueError(f"{len(unknown)} node(s) in edges have no name in names")
    ops = list(dict.fromkeys(k for e in edges for k in e
                             if k is not None and names[k] not in params))
    # Name the operations in forward order (the backward graph reversed), numbering
    # repeated ones: "Addmm 1" is the first layer's product.
    back = nx.DiGraph()
    back.add_nodes_from(ops)
    back.add_edges_from((a, b) for a, b in edges if b is not None and names[b] not in params)
    if not nx.is_directed_acyclic_graph(back):
        raise ValueError("the edges do not form a backward graph (there is a cycle)")
    order = list(reversed(list(nx.topological_sort(back))))
    total = {n: sum(1 for k in ops if _short(names[k]) == n) for n in map(_short, names.values())}
    seen: dict[str, int] = {}
    label: dict[Hashable, str] = {}
    for k in order:
        base = _short(names[k])
        seen[base] = seen.get(base, 0) + 1
        label[k] = base if total[base] == 1 else f"{base} {seen[base]}"
    for k in {b for _, b in edges if b is not None and names[b] in params}:
        label[k] = names[k]
    g = nx.DiGraph(stagger_labels=True, legend_loc="upper left")

    def node(name: str, device: str, kind: str = "compute") -> str:
        g.add_node(name, device=device, kind=kind, label=_wrap(name.split(" @")[0]))
        return name

    split = node("split batch", host)
    for d in devices:
        send = node(f"send half @{d}", "link", "copy")
        g.add_edge(split, send)
        fwd = {k: node(f"fwd {label[k]} @{d}", d) for k in ops}
        bwd = {k: node(f"bwd {label[k]} @{d}", d) for k in ops}
        for a, b in edges:
            if b is None:  # reads the batch or the labels
                g.add_edge(send, fwd[a])
            elif names[b] in params:  # a's backward writes this parameter's gradient
                grad = node(f"grad {label[b]} @{d}", d)
                g.add_edge(bwd[a], grad)
            else:  # forward: b's output feeds a; backward: a's gradient feeds b
                g.add_edge(fwd[b], fwd[a])
                g.add_edge(bwd[a], bwd[b])
        for k in ops:
            g.add_edge(fwd[k], bwd[k])  # backward reads what its forward kept
    for p in sorted({label[b] for _, b in edges if b is not None and names[b] in params}):
        red = node(f"all-reduce {p}", "link", "comm")
        for d in devices:
            g.add_edge(f"grad {p} @{d}", red)
            g.add_edge(red, node(f"update {p} @{d}", d))
    return g


def step_facts(g: nx.DiGraph, devices: Sequence[str] = ("gpu:0", "gpu:1")) -> list[str]:
    """What may run at the same time in a :func:`training_step_graph`, read off it."""
    on = {d: [n for n, a in g.nodes(data=True) if a.get("device") == d] for d in devices}
    facts = []
    if len(devices) >= 2:
        a, b = devices[0], devices[1]
        linked = any(nx.has_path(g, x, y) for x in on[a] for y in on[b]
                     if not y.startswith("update"))
        facts.append(f"{a} and {b} share no edge before the all-reduces: their forward and "
                     "backward passes can run at the same time" if not linked else
                     f"{a} and {b} depend on each other before the all-reduces")
    d = devices[0]
    reduces = sorted((n for n, a in g.nodes(data=True) if a.get("kind") == "comm"),
                     key=lambda n: len(nx.ancestors(g, n)))
    bwd = [n for n in on[d] if n.startswith("bwd ")]
    if reduces and bwd:
        first = reduces[0]
        free = [n.split(" @")[0] for n in bwd
                if not nx.has_path(g, n, first) and not nx.has_path(g, first, n)]
        if free:
            facts.append(f"{first} depends on none of {', '.join(free)} on {d}: it can "
                         "overlap with the rest of the backward pass")
    facts.append("each update waits only for its own parameter's all-reduce")
    return facts
