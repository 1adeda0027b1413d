"""The resource graph: devices, the links between them, and where each figure comes from.

A :class:`Cluster` is ``n`` identical devices (compute rate, memory) in nodes of
``per_node`` devices. Devices inside a node talk over the ``intra`` :class:`Link`, devices
in different nodes over the ``inter`` link. A collective over a group of ranks runs at the
speed of the slowest link the group crosses (:meth:`Cluster.link`), as in Paddle's own
cost model, which prices a ring by the largest per-byte time between any two of its ranks.

The presets (:data:`PRESETS`) are descriptions, not measurements: compute rates, memory
and link bandwidths from the vendors' datasheets, latencies per ring step from the
defaults of Paddle's cost model. :func:`calibrated_cluster` builds one from figures
measured on this machine.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .rates import A100, Rates, compute_rate

__all__ = ["Link", "Cluster", "PRESETS", "calibrated_cluster", "with_devices", "fmt_bytes"]


@dataclass(frozen=True)
class Link:
    """What one rank gets from its link in a ring collective: ``bandwidth`` bytes/s it
    sends, and ``latency`` seconds per ring step."""

    name: str
    bandwidth: float
    latency: float


@dataclass(frozen=True)
class Cluster:
    """``n`` identical devices; ``per_node`` of them share a node (``None``: all of them)."""

    name: str
    n: int
    flops: float              # FP32 FLOP/s of one device (measured: its one rate)
    memory: float             # bytes one device can hold
    intra: Link               # between devices of one node
    inter: Link | None = None  # between nodes
    per_node: int | None = None
    assumptions: str = ""
    overhead: float = 0.0     # seconds the framework adds to every step (0: not modelled)
    rates: Rates | None = None  # per precision (.rates); None: ``flops`` in every one

    @property
    def bf16_flops(self) -> float:
        """The rate 16-bit mixed precision trains at (:func:`.rates.compute_rate`)."""
        return compute_rate(self, "bf16")

    # one link for the whole cluster: what a single-node description reads
    @property
    def bandwidth(self) -> float:
        return self.intra.bandwidth

    @property
    def latency(self) -> float:
        return self.intra.latency

    def nodes_spanned(self, ranks: int, stride: int = 1) -> int:
        """How many nodes a group of ``ranks`` ranks, ``stride`` apart, touches."""
        node = self.per_node or self.n
        return len({(i * stride) // node for i in range(ranks)})

    def link(self, ranks: int, stride: int = 1) -> Link:
        """The link a ring over such a group runs at: its slowest."""
        if self.nodes_spanned(ranks, stride) > 1:
            if self.inter is None:
                raise ValueError(f"{self.name}: a group spans nodes but no inter-node "
                                 "link is described (give Cluster(inter=Link(...)))")
            return self.inter
        return self.intra

    def describe(self) -> str:
        nodes = "" if not self.per_node or self.per_node >= self.n else \
            f" in {self.n // self.per_node} nodes of {self.per_node}"
        links = f"{self.intra.name} {_gbs(self.intra.bandwidth)}, " \
                f"{self.intra.latency * 1e6:.3g} us"
        if self.inter is not None and nodes:
            links += f"; between nodes {self.inter.name} {_gbs(self.inter.bandwidth)}, " \
                     f"{self.inter.latency * 1e6:.3g} us"
        extra = f"; framework overhead {self.overhead * 1e3:.3g} ms/step" \
            if self.overhead else ""
        memory = "memory not limited (a budget, not a measurement)" \
            if self.memory >= 2**40 else f"{self.memory / 2**30:.3g} GiB"
        # three lines, each short enough for an output box (at most 100 characters)
        return (f"{self.name}: {self.n} devices{nodes} x {_flops(self.flops)},\n  "
                f"{memory};\n  links {links}{extra}")


# Figures, per rank and direction. A100 datasheet: FP32 19.5 TFLOP/s (no tensor cores:
# the default for float32 matmuls in PyTorch), 80 GB, NVLink 600 GB/s and PCIe Gen4
# 64 GB/s, both counted in the two directions together; a ring sends one way, so half.
# Latency per ring step: Paddle's cost model (CommContext) defaults, 3.4 us over NVLink,
# 5.7 us through a PCIe host bridge, 9.6 us between machines. 100 Gb Ethernet: one port
# per node, shared by its 8 GPUs when all of them cross at once.
# The compute rate per precision (FP32, TF32, BF16/FP16) is the rate model's A100
# (.rates): datasheet peaks at a stated fraction; every planner module reads it through
# compute_rate with the precision its plan computes in.
_A100 = dict(flops=A100.rate("fp32"), memory=80 * 2**30, rates=A100)
_NVLINK = Link("NVLink", 600e9 / 2, 3.4e-6)
_PCIE = Link("PCIe Gen4 x16", 64e9 / 2, 5.7e-6)
_ETHERNET = Link("100 Gb Ethernet", 100e9 / 8 / 8, 9.6e-6)
_SOURCES = ("assumed, not measured: A100 datasheet figures (FP32 peak 19.5 TFLOP/s, "
            "TF32 156 and BF16 312 TFLOP/s on tensor cores, priced at "
            f"{A100.achievable:.0%} of the peak; 80 GB; {{links}}); ring latencies are "
            "Paddle's cost-model defaults; no framework overhead")

PRESETS = {
    "8 GPUs NVLink": Cluster(
        "8 GPUs NVLink", 8, intra=_NVLINK, **_A100,
        assumptions=_SOURCES.format(links="NVLink 600 GB/s both ways, 300 GB/s per "
                                          "direction; 3.4 us per ring step")),
    "8 GPUs PCIe": Cluster(
        "8 GPUs PCIe", 8, intra=_PCIE, **_A100,
        assumptions=_SOURCES.format(links="PCIe Gen4 x16 64 GB/s both ways, 32 GB/s per "
                                          "direction; 5.7 us per ring step")),
    "2 x 8 GPUs, Ethernet": Cluster(
        "2 x 8 GPUs, Ethernet", 16, intra=_NVLINK, inter=_ETHERNET, per_node=8, **_A100,
        assumptions=_SOURCES.format(links="NVLink inside a node; between the nodes one "
                                          "100 Gb/s Ethernet port each, 12.5 GB/s shared "
                                          "by 8 GPUs; 9.6 us per ring step")),
}


def _flops(rate: float) -> str:
    return f"{rate / 1e12:.3g} TFLOP/s" if rate >= 1e11 else f"{rate / 1e9:.3g} GFLOP/s"


def _gbs(bandwidth: float) -> str:
    return "no bandwidth fitted (latency only)" if bandwidth == float("inf") \
        else f"{bandwidth / 1e9:.3g} GB/s"


def calibrated_cluster(n: int, flops: float, bandwidth: float, latency: float,
                       memory: float, overhead: float = 0.0,
                       name: str = "this machine's CPU ranks") -> Cluster:
    """A cluster from figures measured here: one node, one link."""
    return Cluster(name, n, flops, memory, Link("gloo (loopback TCP)", bandwidth, latency),
                   assumptions="measured on this machine: the compute rate of an unsplit "
                               "training step, latency/bandwidth fitted to timed "
                               "collectives, the framework's overhead per step",
                   overhead=overhead)


def with_devices(cluster: Cluster, n: int) -> Cluster:
    """The same resource graph with ``n`` devices."""
    return replace(cluster, n=n)


def fmt_bytes(x: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.2f} {unit}"
        x /= 1024
    return f"{x:.2f} GiB"
