"""A small automatic-parallelism planner: resource graph, cost model, strategy search.

It mirrors, in miniature, the design of Paddle's automatic parallelism (a *unified
resource graph* describing devices and links, a *global cost model*, and a *planner* that
searches the space of parallel strategies), for one model family: an MLP of bias-free
``Linear`` layers with ReLU between them, trained with plain SGD.

The pieces, each usable on its own:

- :class:`Cluster`: the resource graph. ``n`` identical devices (compute rate in FLOP/s,
  memory in bytes) joined by links (bandwidth in bytes/s, latency in s). Presets in
  :data:`PRESETS` state their figures as assumptions; :func:`calibrated_cluster` builds one
  from figures measured on this machine.
- :func:`comm_plan` / :func:`comm_bytes`: the collectives a placement needs and the bytes
  each rank sends. A layer's placement is ``"R"`` (weight replicated), ``"col"`` (weight
  split by output features) or ``"row"`` (split by input features).
- :func:`predict`: step time and memory per device of one :class:`Strategy`.
- :func:`enumerate_strategies` and :func:`best_strategy`: the search.

The cost model (written down here, where it is used):

- compute: ``2*b*i*o`` FLOPs forward per layer, the same again for the weight gradient and
  again for the input gradient (skipped for the first layer); a sharded layer does ``1/tp``
  of it, a replicated one all of it. Time = FLOPs / rate.
- communication: ring collectives on ``p`` ranks, alpha-beta model. For a tensor of ``n``
  bytes (the full, unsharded size): all-reduce sends ``2(p-1)/p*n`` bytes per rank in
  ``2(p-1)`` steps; all-gather and reduce-scatter send ``(p-1)/p*n`` in ``p-1`` steps.
  Time = steps*latency + bytes/bandwidth.
- no overlap of computation and communication (an upper bound on a real framework's time).
- memory per device: weights + gradients (+ ``opt_states`` copies for the optimizer) +
  the activations kept for the backward pass, in fp32 by default.

Activation layouts between layers are ``"R"`` (replicated), ``"S"`` (split by features)
or ``"P"`` (partial sums, after a row-split layer). ReLU cannot run on partial sums, so a
``"P"`` output is reduced before the next layer. The conversions:
``R->S`` free (each rank slices), ``S->R`` all-gather, ``P->R`` all-reduce,
``P->S`` reduce-scatter. Gradients flow back with the same table.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from ..wire import value_type

__all__ = ["Cluster", "PRESETS", "calibrated_cluster", "Strategy", "Collective", "comm_plan",
           "comm_bytes", "Prediction", "predict", "enumerate_strategies", "best_strategy",
           "PLACEMENTS", "ring_bytes", "collective_time", "fit_link", "with_devices", "fmt_bytes"]

PLACEMENTS = ("R", "col", "row")
_NEEDS = {"R": "R", "col": "R", "row": "S"}   # input layout each placement needs
_GIVES = {"R": "R", "col": "S", "row": "P"}   # output layout it produces
_CONVERT = {("R", "R"): None, ("S", "S"): None, ("R", "S"): None,
            ("S", "R"): "all_gather", ("P", "R"): "all_reduce", ("P", "S"): "reduce_scatter"}


@dataclass(frozen=True)
class Cluster:
    """The resource graph: ``n`` identical devices, and the links between them."""

    name: str
    n: int
    flops: float            # sustained FLOP/s of one device on these matmuls
    memory: float           # bytes one device can hold
    bandwidth: float        # bytes/s one rank sends over its link in a ring collective
    latency: float          # seconds per step of a collective
    assumptions: str = ""

    def describe(self) -> str:
        return (f"{self.name}: {self.n} devices x {self.flops / 1e12:.3g} TFLOP/s, "
                f"{self.memory / 2**30:.3g} GiB; links {self.bandwidth / 1e9:.3g} GB/s, "
                f"{self.latency * 1e6:.3g} us latency")


PRESETS = {
    "8 GPUs NVLink": Cluster(
        "8 GPUs NVLink", 8, flops=50e12, memory=80 * 2**30, bandwidth=150e9, latency=10e-6,
        assumptions="assumed, not measured: 50 TFLOP/s sustained per GPU (TF32 matmuls of "
                    "a large MLP), 80 GiB each, 150 GB/s per rank in a ring all-reduce over "
                    "NVLink/NVSwitch, 10 us per collective step"),
    "8 GPUs PCIe": Cluster(
        "8 GPUs PCIe", 8, flops=50e12, memory=80 * 2**30, bandwidth=10e9, latency=20e-6,
        assumptions="assumed, not measured: the same GPUs, but collectives cross PCIe 4.0 "
                    "x16 and host bridges: 10 GB/s per rank in a ring, 20 us per step"),
}


def calibrated_cluster(n: int, flops: float, bandwidth: float, latency: float,
                       memory: float, name: str = "this machine's CPU ranks") -> Cluster:
    """A cluster from figures measured here (see ``sharding.calibrate_rank``)."""
    return Cluster(name, n, flops, memory, bandwidth, latency,
                   assumptions="measured on this machine: matmul rate of one rank, and a "
                               "latency/bandwidth fit to timed all-reduces between 2 ranks")


@value_type(rebuild=lambda f: {**f, "placements": tuple(f["placements"])})
@dataclass(frozen=True)
class Strategy:
    """``dp`` data-parallel replicas, each a group of ``tp`` ranks sharing every layer by
    its placement (``"R"``, ``"col"`` or ``"row"``). ``dp * tp`` devices in all."""

    dp: int
    tp: int
    placements: tuple[str, ...]

    def __str__(self) -> str:
        return f"dp={self.dp} tp={self.tp} [{' '.join(self.placements)}]"


@dataclass(frozen=True)
class Collective:
    """One collective of a step: what, where in the step, over how many ranks, on a tensor
    of ``size`` bytes (full, unsharded size), sending ``sent`` bytes per rank."""

    op: str
    where: str
    ranks: int
    size: int
    sent: float


def ring_bytes(op: str, size: float, p: int) -> float:
    """Bytes one rank sends in a ring ``op`` on a tensor of ``size`` bytes over ``p`` ranks."""
    if p <= 1:
        return 0.0
    factor = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}[op]
    return factor * (p - 1) / p * size


def collective_time(op: str, size: float, p: int, bandwidth: float, latency: float) -> float:
    if p <= 1:
        return 0.0
    steps = (2 if op == "all_reduce" else 1) * (p - 1)
    return steps * latency + ring_bytes(op, size, p) / bandwidth


def _check(dims: list[int], placements: tuple[str, ...] | list[str]) -> None:
    if len(placements) != len(dims) - 1:
        raise ValueError(f"{len(dims) - 1} layers need {len(dims) - 1} placements, "
                         f"got {len(placements)}")
    bad = [p for p in placements if p not in PLACEMENTS]
    if bad:
        raise ValueError(f"unknown placement(s) {bad}: use {PLACEMENTS}")


def comm_plan(dims: list[int], placements, batch: int, tp: int = 2, dp: int = 1,
              itemsize: int = 4) -> list[Collective]:
    """Every collective of one training step, in order (forward, then backward, then the
    data-parallel gradient all-reduce). ``dims = [in, hidden..., out]``; ``batch`` is the
    global batch, split over ``dp`` replicas."""
    placements = tuple(placements)
    _check(dims, placements)
    if batch % dp:
        raise ValueError(f"batch {batch} does not split over dp={dp}")
    b = batch // dp
    out: list[Collective] = []

    def add(op: str | None, where: str, numel: int) -> None:
        if op and tp > 1:
            size = numel * itemsize
            out.append(Collective(op, where, tp, size, ring_bytes(op, size, tp)))

    # forward: layer k's output layout must become what layer k+1 needs (R for the loss)
    layouts = ["R"]                                # layout of each layer's input
    for k, pl in enumerate(placements):
        need = _NEEDS[placements[k + 1]] if k + 1 < len(placements) else "R"
        add(_CONVERT[(_GIVES[pl], need)], f"fwd after layer {k}", b * dims[k + 1])
        layouts.append(need)
    # backward: the gradient of layer k's output arrives in the layout layer k+1 produced
    # for its input gradient, and must become what layer k's backward needs
    grad_in = {"R": "R", "col": "P", "row": "S"}   # layout of dL/dx a placement produces
    grad_out_need = {"R": "R", "col": "S", "row": "R"}
    for k in range(len(placements) - 1, -1, -1):
        have = "R" if k == len(placements) - 1 else grad_in[placements[k + 1]]
        need = grad_out_need[placements[k]]
        op = None if have == "R" else _CONVERT[(have, need)]   # R -> S is a local slice
        add(op, f"bwd into layer {k}", b * dims[k + 1])
    if dp > 1:
        params = sum(dims[k] * dims[k + 1] // (tp if pl != "R" else 1)
                     for k, pl in enumerate(placements))
        size = params * itemsize
        out.append(Collective("all_reduce", "dp gradients", dp, size,
                              ring_bytes("all_reduce", size, dp)))
    return out


def comm_bytes(layer_shapes, placements, batch: int, dtype: str = "float32", tp: int = 2,
               dp: int = 1) -> float:
    """Bytes one rank sends in one training step (ring collectives).

    ``layer_shapes``: ``[(in, out), ...]`` of consecutive ``Linear`` layers;
    ``placements``: one of ``"R"``, ``"col"``, ``"row"`` per layer. Example: a 2-layer MLP
    split column-wise then row-wise over 2 ranks needs one all-reduce of the output
    (``batch*out`` floats) forward and none backward (the first layer needs no input
    gradient): ``comm_bytes([(8, 16), (16, 4)], ["col", "row"], 32) == 2*(1/2)*32*4*4``.
    """
    itemsize = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}[dtype]
    dims = [layer_shapes[0][0]] + [o for _, o in layer_shapes]
    for (i, _), (_, o_prev) in zip(layer_shapes[1:], layer_shapes[:-1]):
        if i != o_prev:
            raise ValueError(f"layer shapes do not chain: {layer_shapes}")
    return sum(c.sent for c in comm_plan(dims, placements, batch, tp, dp, itemsize))


@dataclass
class Prediction:
    strategy: Strategy
    compute_s: float
    comm_s: float
    memory: float                      # bytes on the busiest device
    bytes_sent: float                  # per rank per step
    fits: bool
    collectives: list[Collective] = field(default_factory=list)

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s


def predict(dims: list[int], batch: int, strategy: Strategy, cluster: Cluster,
            itemsize: int = 4, opt_states: int = 0) -> Prediction:
    """Step time and memory per device of ``strategy`` on ``cluster`` (see the module doc)."""
    pl, tp, dp = strategy.placements, strategy.tp, strategy.dp
    _check(dims, pl)
    b = batch // dp
    flops = 0.0
    mem_params = 0.0
    mem_acts = 0.0
    for k, p in enumerate(pl):
        share = 1 / tp if p != "R" else 1.0
        passes = 2 if k == 0 else 3            # fwd + weight grad (+ input grad)
        flops += passes * 2 * b * dims[k] * dims[k + 1] * share
        mem_params += dims[k] * dims[k + 1] * share * itemsize
        in_share = 1 / tp if p == "row" else 1.0   # a row layer keeps only its input slice
        mem_acts += b * dims[k] * in_share * itemsize
    colls = comm_plan(dims, pl, batch, tp, dp, itemsize)
    comm = sum(collective_time(c.op, c.size, c.ranks, cluster.bandwidth, cluster.latency)
               for c in colls)
    memory = mem_params * (2 + opt_states) + mem_acts
    return Prediction(strategy, flops / cluster.flops, comm, memory,
                      sum(c.sent for c in colls), memory <= cluster.memory, colls)


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
                  opt_states: int = 0) -> tuple[Prediction, list[Prediction]]:
    """The fastest strategy that fits in memory, and every prediction, fastest first."""
    preds = [predict(dims, batch, s, cluster, itemsize, opt_states)
             for s in enumerate_strategies(dims, batch, cluster.n)]
    if not preds:
        raise ValueError(f"no strategy splits batch {batch} and dims {dims} over {cluster.n}")
    # ties (e.g. all-replicated layers inside a tp group) go to the simpler strategy
    preds.sort(key=lambda p: (not p.fits, round(p.step_s, 12), p.strategy.tp,
                              sum(x != "R" for x in p.strategy.placements)))
    return preds[0], preds


def fit_link(samples, p: int = 2) -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of the ring all-reduce model fitted, by least squares,
    to measured ``[(bytes, seconds), ...]`` of all-reduces over ``p`` ranks:
    ``t = 2(p-1)*latency + 2(p-1)/p*bytes/bandwidth``."""
    xs = [(2 * (p - 1), 2 * (p - 1) / p * n) for n, _ in samples]
    ys = [t for _, t in samples]
    sxx = [[sum(a[i] * a[j] for a in xs) for j in range(2)] for i in range(2)]
    sxy = [sum(a[i] * y for a, y in zip(xs, ys)) for i in range(2)]
    det = sxx[0][0] * sxx[1][1] - sxx[0][1] ** 2
    lat = (sxy[0] * sxx[1][1] - sxx[0][1] * sxy[1]) / det
    inv_bw = (sxx[0][0] * sxy[1] - sxx[0][1] * sxy[0]) / det
    if inv_bw <= 0:
        raise ValueError(f"all-reduce times do not grow with size: {samples}")
    return max(lat, 0.0), 1 / inv_bw


def with_devices(cluster: Cluster, n: int) -> Cluster:
    """The same resource graph with ``n`` devices."""
    return replace(cluster, n=n)


def fmt_bytes(x: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.2f} {unit}"
        x /= 1024
    return f"{x:.2f} GiB"


