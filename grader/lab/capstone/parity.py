"""The same loss in every layout: each layout's loss curve against the one-process
curve the same launch computed, and the tolerance they must meet.

Why a tolerance at all, and why 1e-5: in float32 every layout computes the same sums
in another order (a gradient summed over shards and then over ranks, a matrix product
split by columns and added up by an all-reduce), and float32 addition is not
associative: each reordered sum may differ in its last bit, about 1.2e-7 of its value
(float32's machine epsilon, 2^-23). A few steps of training carry such differences
forward without growing them much; 1e-5 relative is about 80 times the last bit, far
below what a real bug makes: a gradient averaged twice over 4 ranks shrinks every step
4-fold and moves the loss by percents within a few steps.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TOLERANCE = 1e-5          # relative, on every step's loss


def load(path) -> dict | None:
    """A launch's JSON, or None where it wrote none (a machine without the framework)."""
    p = Path(path)
    return json.loads(p.read_text()) if p.exists() else None


def worst_relative(losses: list[float], reference: list[float]) -> float:
    """The largest ``|loss - reference| / |reference|`` over the steps. Curves of
    different lengths, or an empty one, are an error (they cannot be compared)."""
    if not losses or len(losses) != len(reference):
        raise ValueError(f"{len(losses)} losses against {len(reference)} reference "
                         "steps: a layout's curve must have one loss per step")
    return max(abs(a - b) / abs(b) for a, b in zip(losses, reference))


@dataclass(frozen=True)
class ParityRow:
    layout: str          # "RxSxTxP"
    control: bool        # the gradients averaged twice on purpose
    worst: float         # largest relative difference from the one-process loss
    ranks: int

    @property
    def within(self) -> bool:
        return self.worst <= TOLERANCE


def parity(record: dict) -> list[ParityRow]:
    """One row per layout a launch trained, against the launch's own one-process
    curve; not the runs that show a drift's cause on purpose (``views``: the Paddle
    script's batch passed as slices of one tensor), which :func:`drifts` lists, nor
    the runs resumed from a checkpoint, which :func:`~.resume.resumes` compares."""
    ref = record["reference"]
    return [ParityRow(r["layout"], bool(r.get("control")),
                      worst_relative(r["losses"], ref), record["world"])
            for r in record["runs"] if not r.get("views") and not r.get("resumed")]


def drifts(record: dict) -> list[tuple[str, float, float]]:
    """(layout, relative difference at the first step, largest) of the runs that
    show a drift's cause (``views``)."""
    ref = record["reference"]
    return [(r["layout"], abs(r["losses"][0] - ref[0]) / abs(ref[0]),
             worst_relative(r["losses"], ref)) for r in record["runs"] if r.get("views")]


def parity_words(rows: list[ParityRow]) -> str:
    """The sentence on the runs, for whatever they measured: how many layouts lie on
    the one-process curve, the largest difference, and what the control did."""
    real = [r for r in rows if not r.control]
    controls = [r for r in rows if r.control]
    on = [r for r in real if r.within]
    off = [r for r in real if not r.within]
    words = (f"{len(on)} of the {len(real)} layouts lie" if len(real) > 1 else
             "the layout lies" if on else "the layout does not lie")
    words += f" on the one-process curve within {TOLERANCE:.0e}"
    if on:
        words += f" (largest relative difference {max(r.worst for r in on):.1e})"
    if off:
        words += ("; off it: " + ", ".join(f"{r.layout} ({r.worst:.1e})" for r in off))
    for c in controls:
        words += (f"; the control, {c.layout} with its gradients averaged twice, "
                  + (f"leaves it by {c.worst:.1e}, as it must" if not c.within else
                     f"stays within it ({c.worst:.1e}): the check failed to catch it"))
    return words


def loss_figure(records: list[dict], title: str):
    """Left: every layout's loss per step, the one-process curve under them. Right:
    each layout's relative difference from the one-process loss, on a log scale,
    with the tolerance drawn: the curves on the left lie on top of each other, so
    the right panel is where they can be told apart."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    ref = records[0]["reference"]
    steps = range(len(ref))
    left.plot(steps, ref, color="black", lw=4, alpha=0.25, label="one process")
    for rec in records:
        for r in (r for r in rec["runs"] if not r.get("resumed")):
            style = {"ls": "--", "color": "black"} if r.get("control") else \
                {"ls": ":", "color": "grey"} if r.get("views") else {}
            name = r["layout"] + (" averaged twice" if r.get("control") else
                                  " batch as views" if r.get("views") else "")
            left.plot(steps, r["losses"], marker=".", label=name, **style)
            rel = [max(abs(a - b) / abs(b), 1e-9) for a, b in zip(r["losses"], ref)]
            right.semilogy(steps, rel, marker=".", label=name, **style)
    right.axhline(TOLERANCE, color="grey", ls=":", label=f"tolerance {TOLERANCE:.0e}")
    left.set(xlabel="step", ylabel="loss", title=title)
    right.set(xlabel="step", ylabel="|loss - one process| / one process",
              title="difference from one process (1e-9: equal)")
    right.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
