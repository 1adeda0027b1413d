"""The cost model: step time and memory per device of one strategy on one cluster.

A prediction is a sum of named terms, each computed by its own function, so that new
kinds of parallelism add terms rather than rewrite the model:

- ``compute``: ``2*b*i*o`` FLOPs forward per layer, as much again for the weight
  gradient and again for the input gradient (skipped for the first layer). A split layer
  does ``1/tp`` of it, a replicated one all of it. Time = FLOPs / the device's rate.
- ``tp communication``: the collectives of :func:`~.layouts.comm_plan` inside a
  tensor-parallel group, on the link that group runs over;
- ``dp communication``: the gradient all-reduce over the data-parallel replicas, on the
  link that group runs over (across nodes, when the replicas are in different nodes);
- ``overhead``: what the framework adds to every step whatever the plan (the cluster's
  ``overhead``: measured for this machine's ranks, 0 in the GPU presets).

No overlap of computation and communication is assumed, and nothing else: small matmuls
run at the rate of large ones, a framework's collective costs what a bare one does. How
far that is from a real step is measured, not assumed (see the automatic-parallelism
chapter).

Memory per device is a breakdown too (``params``, ``grads``, ``optimizer`` and
``activations``, in bytes), so that a plan that does not fit is refused.

Growing it (sharded optimizer states, pipeline stages) means: a new field on
:class:`Strategy`, a new memory or time term, and the enumeration in
:mod:`.search` offering the new choices.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...wire import value_type
from .cluster import Cluster
from .collectives import collective_time
from .layouts import Collective, comm_plan, validate_plan
from .rates import compute_rate, precision_of

__all__ = ["Strategy", "Prediction", "predict", "compute_flops", "memory_terms"]


@value_type(rebuild=lambda f: {**f, "placements": tuple(f["placements"])})
@dataclass(frozen=True)
class Strategy:
    """``dp`` data-parallel replicas, each a group of ``tp`` ranks sharing every layer by
    its placement (``"R"``, ``"col"`` or ``"row"``). ``dp * tp`` devices in all; ranks
    ``r`` and ``r + 1`` are in the same tensor-parallel group (``tp`` is the inner
    dimension of the mesh, as in ``init_device_mesh(..., (dp, tp))``)."""

    dp: int
    tp: int
    placements: tuple[str, ...]

    def __str__(self) -> str:
        return f"dp={self.dp} tp={self.tp} [{' '.join(self.placements)}]"

    @property
    def plan(self) -> str:
        """The chapter scripts' spelling, ``"DPxTP:p1,p2,..."``."""
        return f"{self.dp}x{self.tp}:{','.join(self.placements)}"

    @classmethod
    def parse(cls, plan: str) -> "Strategy":
        try:
            shape, placements = plan.split(":")
            dp, tp = (int(v) for v in shape.split("x"))
        except ValueError:
            raise ValueError(f"{plan!r}: write a plan as DPxTP:p1,p2,... "
                             "(e.g. 2x2:col,row)") from None
        return cls(dp, tp, tuple(placements.split(",")))


@dataclass
class Prediction:
    strategy: Strategy
    terms: dict[str, float]                  # seconds per step, by source
    memory_terms: dict[str, float]           # bytes on the busiest device, by kind
    fits: bool
    collectives: list[Collective] = field(default_factory=list)

    @property
    def step_s(self) -> float:
        return sum(self.terms.values())

    @property
    def devices(self) -> int:
        """How many devices the strategy uses (``dp * tp``)."""
        return self.strategy.dp * self.strategy.tp

    @property
    def compute_s(self) -> float:
        return self.terms.get("compute", 0.0)

    @property
    def comm_s(self) -> float:
        return self.step_s - self.compute_s

    @property
    def memory(self) -> float:
        return sum(self.memory_terms.values())

    @property
    def bytes_sent(self) -> float:
        """Bytes one rank sends per step."""
        return sum(c.sent for c in self.collectives)


def compute_flops(dims, batch: int, strategy: Strategy) -> float:
    """FLOPs one device does in one training step (forward and backward)."""
    b = batch // strategy.dp
    flops = 0.0
    for k, p in enumerate(strategy.placements):
        share = 1 / strategy.tp if p != "R" else 1.0
        passes = 2 if k == 0 else 3            # fwd + weight grad (+ input grad)
        flops += passes * 2 * b * dims[k] * dims[k + 1] * share
    return flops


def memory_terms(dims, batch: int, strategy: Strategy, itemsize: int = 4,
                 opt_states: int = 0) -> dict[str, float]:
    """Bytes on one device: its share of the weights, their gradients, ``opt_states``
    optimizer values per weight (0 for plain SGD, 2 for Adam), and the activations kept
    for the backward pass."""
    b = batch // strategy.dp
    params = acts = 0.0
    for k, p in enumerate(strategy.placements):
        params += dims[k] * dims[k + 1] * (1 / strategy.tp if p != "R" else 1.0) * itemsize
        in_share = 1 / strategy.tp if p == "row" else 1.0   # a row layer keeps its slice
        acts += b * dims[k] * in_share * itemsize
    return {"params": params, "grads": params, "optimizer": opt_states * params,
            "activations": acts}


def _comm_time(c: Collective, strategy: Strategy, cluster: Cluster) -> float:
    stride = 1 if c.group == "tp" else strategy.tp       # tp is the inner mesh dimension
    link = cluster.link(c.ranks, stride)
    return collective_time(c.op, c.size, c.ranks, link.bandwidth, link.latency)


def predict(dims: list[int], batch: int, strategy: Strategy, cluster: Cluster,
            itemsize: int = 4, opt_states: int = 0, dp_sync: str = "fused") -> Prediction:
    """Step time and memory per device of ``strategy`` on ``cluster``."""
    pl = strategy.placements
    validate_plan(dims, pl)
    if strategy.dp * strategy.tp != cluster.n:
        raise ValueError(f"{strategy} uses {strategy.dp * strategy.tp} devices, "
                         f"{cluster.name} has {cluster.n}")
    colls = comm_plan(dims, pl, batch, strategy.tp, strategy.dp, itemsize, dp_sync)
    terms = {"compute": compute_flops(dims, batch, strategy)
             / compute_rate(cluster, precision_of(itemsize))}
    for group in ("tp", "dp"):
        terms[f"{group} communication"] = sum(
            _comm_time(c, strategy, cluster) for c in colls if c.group == group)
    terms["overhead"] = cluster.overhead
    memory = memory_terms(dims, batch, strategy, itemsize, opt_states)
    return Prediction(strategy, terms, memory, sum(memory.values()) <= cluster.memory, colls)
