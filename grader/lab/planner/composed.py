"""One description of a composed layout, read by the capstone's runs, the planner and
the page alike.

A :class:`Layout` is ``replicate x shard x tp x pp``: ``replicate`` groups of whole
copies (data parallel across them), each sharded over ``shard`` ranks (FSDP/ZeRO-3;
the two together are HSDP), every block's matrices split over ``tp`` ranks (Megatron's
column-then-row split) and the blocks cut into ``pp`` pipeline stages run by a
``schedule`` over ``micro`` micro-batches. Its text form ``"RxSxTxP"`` (e.g.
``"2x2x2x2"``) is what the chapter's scripts take on their command line
(``--layouts 1x2x2x1``) and write back into their records, so :meth:`Layout.parse`
of a record's layout is the layout the planner prices.

The planner had two descriptions of a layout before this one, each for its chapter:
:class:`~.sharded.Plan` (data, ZeRO, tensor and pipeline degrees) and
:class:`~.mesh.MeshPlan` (data, tensor, context and expert degrees, no pipeline).
:meth:`Layout.plan` and :meth:`Layout.mesh_plan` translate to them, so that each of
their predictions is made for the same layout, and :func:`predict` prices a layout
with :func:`~.sharded.predict_plan` (the one of the two that knows pipelines).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .cluster import Cluster, with_devices
from .mesh import MeshPlan
from .sharded import SCHEDULES, Plan, PlanPrediction, Transformer, predict_plan

__all__ = ["Layout", "predict", "DIM_NAMES"]

# the mesh's dimensions, outermost first (torchtitan's order: the pipeline outermost,
# tensor parallelism innermost, on the neighbouring ranks with the fastest links)
DIM_NAMES = ("pp", "dp_replicate", "dp_shard", "tp")
_TEXT = re.compile(r"^\s*(\d+)x(\d+)x(\d+)x(\d+)\s*$")


@dataclass(frozen=True)
class Layout:
    replicate: int = 1
    shard: int = 1
    tp: int = 1
    pp: int = 1
    micro: int = 2                 # micro-batches per step when pp > 1
    schedule: str = "1F1B"

    def __post_init__(self) -> None:
        degrees = {"replicate": self.replicate, "shard": self.shard, "tp": self.tp,
                   "pp": self.pp, "micro": self.micro}
        bad = [f"{k}={v!r}" for k, v in degrees.items()
               if not isinstance(v, int) or isinstance(v, bool) or v < 1]
        if bad:
            raise ValueError(f"a layout's degrees are whole numbers of at least 1: "
                             f"{', '.join(bad)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r}: use one of {SCHEDULES}")

    @classmethod
    def parse(cls, text: str, **kw) -> "Layout":
        """``"RxSxTxP"`` (replicate x shard x tensor x pipeline) as a layout."""
        m = _TEXT.match(str(text))
        if not m:
            raise ValueError(f"{text!r} is not a layout: write replicate x shard x "
                             "tensor x pipeline as four whole numbers, e.g. '2x2x2x2'")
        r, s, t, p = (int(g) for g in m.groups())
        return cls(r, s, t, p, **kw)

    @property
    def text(self) -> str:
        """What the scripts take: ``"RxSxTxP"``."""
        return f"{self.replicate}x{self.shard}x{self.tp}x{self.pp}"

    @property
    def ranks(self) -> int:
        return self.replicate * self.shard * self.tp * self.pp

    @property
    def dp(self) -> int:
        """Ranks that each train a different part of the batch."""
        return self.replicate * self.shard

    @property
    def mesh_shape(self) -> tuple[int, int, int, int]:
        """The device mesh's shape, in :data:`DIM_NAMES`' order."""
        return (self.pp, self.replicate, self.shard, self.tp)

    @property
    def axes(self) -> int:
        """How many of the four axes are used (degree above 1)."""
        return sum(d > 1 for d in (self.replicate, self.shard, self.tp, self.pp))

    def __str__(self) -> str:
        parts = []
        if self.replicate > 1 and self.shard > 1:
            parts.append(f"HSDP {self.replicate} x {self.shard}")
        elif self.shard > 1:
            parts.append(f"FSDP x{self.shard}")
        elif self.replicate > 1:
            parts.append(f"DP x{self.replicate}")
        if self.tp > 1:
            parts.append(f"TP x{self.tp}")
        if self.pp > 1:
            parts.append(f"PP x{self.pp}")
        return " + ".join(parts) or "1 device"

    def check(self, model: Transformer) -> list[str]:
        """What in the model's sizes rules the layout out (empty: nothing)."""
        out = []
        if model.heads % self.tp or model.vocab % self.tp:
            out.append(f"tp={self.tp} divides neither the {model.heads} heads nor the "
                       f"vocabulary of {model.vocab}")
        if model.blocks % self.pp:
            out.append(f"{model.blocks} blocks do not cut into {self.pp} stages")
        per_rank = model.batch // self.dp if model.batch % self.dp == 0 else 0
        if not per_rank:
            out.append(f"{model.batch} sequences do not split over {self.dp} "
                       "data-parallel ranks")
        elif self.pp > 1 and per_rank % self.micro:
            out.append(f"a rank's {per_rank} sequences do not cut into {self.micro} "
                       "micro-batches")
        return out

    def plan(self) -> Plan:
        """The same layout as :mod:`.sharded` describes it: ZeRO-3 over the ``shard``
        ranks of each of ``replicate`` groups (plain data parallelism if ``shard`` is
        1)."""
        return Plan(dp=self.dp, tp=self.tp, pp=self.pp, zero=3 if self.shard > 1 else 0,
                    micro=self.micro if self.pp > 1 else 1, schedule=self.schedule,
                    replicas=self.replicate if self.shard > 1 else 1)

    def mesh_plan(self) -> MeshPlan:
        """The same layout as :mod:`.mesh` describes it (which has no pipeline: a
        layout with ``pp`` > 1 raises). :class:`~.mesh.MeshPlan` shards over all its
        data-parallel ranks, so HSDP (``replicate`` and ``shard`` both above 1) has
        no MeshPlan either."""
        if self.pp > 1:
            raise ValueError(f"{self}: the mesh planner has no pipeline; use plan()")
        if self.replicate > 1 and self.shard > 1:
            raise ValueError(f"{self}: the mesh planner shards over all data-parallel "
                             "ranks (no HSDP); use plan()")
        return MeshPlan(dp=self.dp, tp=self.tp, zero=3 if self.shard > 1 else 0)


def predict(model: Transformer, layout: Layout, cluster: Cluster) -> PlanPrediction:
    """Memory per rank, bytes sent and step time of ``layout``, as
    :func:`~.sharded.predict_plan` prices its :meth:`Layout.plan`, on ``layout.ranks``
    of ``cluster``'s devices."""
    problems = layout.check(model)
    if problems:
        raise ValueError(f"{layout.text} ({layout}): " + "; ".join(problems))
    return predict_plan(model, layout.plan(), with_devices(cluster, layout.ranks))
