"""The planner's one rate model: how fast a device does a step's matrix products.

A rate is the device's dense peak in the precision the products run in, times the
fraction of it a training step achieves:

    rate = peak[precision] x achievable

- ``precision`` is one of :data:`PRECISIONS`. FP32 is the plain single-precision
  rate (no tensor cores: PyTorch's default for float32 matmuls); TF32 runs float32
  matmuls on tensor cores (``torch.backends.cuda.matmul.allow_tf32``); BF16 and FP16
  are the 16-bit tensor-core rates mixed precision trains at; FP8 the 8-bit rate of a
  Hopper-class device (Transformer Engine), where the device has one.
- ``achievable`` is measured where a device was used (:func:`measured`: the rate a
  run reached over the datasheet's peak) and stated otherwise (the presets say so in
  :attr:`Rates.source`).

Every planner module prices compute through :func:`compute_rate`, with the precision
the model's values are stored in (:func:`precision_of`) or the precision a plan trains
in: before this module the mesh planner priced 16-bit work at the FP32 rate while the
fitting planner used the BF16 one. A :class:`~.cluster.Cluster` without ``rates`` was
calibrated on this machine: its one measured ``flops`` is its rate in every precision
(a CPU has no tensor cores to switch to).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["PRECISIONS", "Rates", "A100", "H100", "precision_of", "compute_rate",
           "measured"]

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
LABELS = {"fp32": "FP32", "tf32": "TF32", "bf16": "BF16", "fp16": "FP16", "fp8": "FP8"}


@dataclass(frozen=True)
class Rates:
    """A device's dense peaks (FLOP/s) per precision and the fraction a step achieves."""

    device: str
    peaks: Mapping[str, float] = field(default_factory=dict)
    achievable: float = 1.0
    source: str = ""

    def __post_init__(self):
        unknown = set(self.peaks) - set(PRECISIONS)
        if unknown:
            raise ValueError(f"unknown precision(s) {sorted(unknown)}: use {PRECISIONS}")
        if not 0 < self.achievable <= 1:
            raise ValueError(f"achievable is a fraction of the peak, in (0, 1]: "
                             f"{self.achievable}")

    def rate(self, precision: str) -> float:
        """FLOP/s of a step's products in ``precision``."""
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}: use {PRECISIONS}")
        if precision not in self.peaks:
            raise ValueError(f"{self.device} has no {LABELS[precision]} rate (it has "
                             f"{', '.join(LABELS[p] for p in self.peaks)})")
        return self.peaks[precision] * self.achievable

    def describe(self) -> str:
        peaks = ", ".join(f"{LABELS[p]} {v / 1e12:g}" for p, v in self.peaks.items())
        return (f"{self.device}: dense peaks {peaks} TFLOP/s, x {self.achievable:.0%} "
                f"achievable ({self.source or 'not stated'})")


# Datasheet dense peaks (no sparsity). The fraction is stated, not measured: no run of
# this book timed these devices, so a plan's compute time is a lower bound.
A100 = Rates("A100 SXM 80GB", {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12,
                               "fp16": 312e12}, 1.0,
             "stated: the datasheet peak, an upper bound; nothing here ran on one")
H100 = Rates("H100 SXM", {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12,
                          "fp16": 989.4e12, "fp8": 1978.9e12}, 1.0,
             "stated: the datasheet peak, an upper bound; nothing here ran on one")


def precision_of(itemsize: int, tf32: bool = False) -> str:
    """The precision a model stored in ``itemsize`` bytes per value computes in: 4 is
    FP32 (TF32 with ``tf32``), 2 is BF16 mixed precision, 1 is FP8."""
    try:
        return {4: "tf32" if tf32 else "fp32", 2: "bf16", 1: "fp8"}[itemsize]
    except KeyError:
        raise ValueError(f"no precision stores values in {itemsize} bytes") from None


def compute_rate(cluster, precision: str) -> float:
    """FLOP/s one device of ``cluster`` sustains in ``precision``: its :class:`Rates`
    where it has them, else the rate measured on it (``cluster.flops``), whatever the
    precision. The one place the planner reads a compute rate."""
    rates = getattr(cluster, "rates", None)
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: use {PRECISIONS}")
    return rates.rate(precision) if rates is not None else cluster.flops


def measured(device: str, precision: str, flops: float, peak: float) -> Rates:
    """Rates from a run on a device: ``flops`` reached against its ``peak`` in
    ``precision`` (the achievable fraction is the measurement)."""
    return Rates(device, {precision: peak}, min(1.0, flops / peak),
                 f"measured: {flops / 1e12:.3g} of {peak / 1e12:.3g} TFLOP/s")
