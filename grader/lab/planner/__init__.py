"""A small automatic-parallelism planner: resource graph, cost model, strategy search.

It mirrors, in miniature, the design of Paddle's automatic parallelism: a *resource
graph* describing devices and links (:mod:`.cluster`), a *cost model* (:mod:`.cost`,
built on the collectives a plan needs, :mod:`.layouts`, priced by the alpha-beta ring
model, :mod:`.collectives`), and a *planner* that searches the space of strategies
(:mod:`.search`), for one model family: an MLP of bias-free ``Linear`` layers with ReLU
between them, trained with plain SGD, over a (dp, tp) mesh. :mod:`.sharded` grows it for
the sharding chapter: a transformer's memory per rank under ZeRO's stages, tensor and
pipeline parallelism (with its bubble) and their 2-D combinations; :mod:`.activations`
for the fitting chapter: activation memory, recomputation and mixed precision, and which
of them makes a plan fit. :mod:`.layers` for the tensor-parallel chapter (TP and SP);
:mod:`.context` (ring attention, CP), :mod:`.experts` (a mixture of experts, EP) and
:mod:`.mesh` (the search over dp, tp, sp, cp and ep) for the context-and-expert chapter.

Every module prices compute through one rate model (:mod:`.rates`): the device's peak in
the precision a plan computes in (FP32, TF32, BF16/FP16, FP8) times an achievable
fraction, measured where a device was used and stated otherwise.

Everything a chapter or a check needs is importable from here.
"""
from .rates import Rates, compute_rate, precision_of
from .cluster import PRESETS, Cluster, Link, calibrated_cluster, fmt_bytes, with_devices
from .collectives import (OPS, LinkFit, collective_time, fit_alpha_beta, fit_link,
                          ring_bytes, ring_steps)
from .cost import Prediction, Strategy, compute_flops, memory_terms, predict
from .layouts import (CONVERT, DP_SYNC, GIVES, NEEDS, PLACEMENTS, Collective, comm_bytes,
                      comm_plan)
from .search import best_strategy, enumerate_strategies, rank_correlation
from .activations import (KNOBS, PRECISIONS, RECOMPUTE, FitResult, FittedPrediction,
                          Knobs, fitting_search, make_it_fit, predict_fitted)
from .sharded import (SCHEDULES, Plan, PlanPrediction, Transformer, bubble_fraction,
                      plan_search, plans_for, predict_plan)
from .context import RingAttention, RingPrediction, predict_ring, ring_pairs
from .experts import MoE
from .mesh import MeshPlan, MeshPrediction, mesh_search, predict_mesh, why_not

__all__ = ["Rates", "compute_rate", "precision_of", "Cluster", "Link", "PRESETS", "calibrated_cluster", "with_devices", "fmt_bytes",
           "OPS", "LinkFit", "collective_time", "fit_alpha_beta", "fit_link", "ring_bytes",
           "ring_steps", "Strategy", "Prediction", "predict", "compute_flops",
           "memory_terms", "PLACEMENTS", "NEEDS", "GIVES", "CONVERT", "DP_SYNC",
           "Collective", "comm_plan", "comm_bytes", "enumerate_strategies",
           "best_strategy", "rank_correlation", "Transformer", "Plan", "PlanPrediction",
           "predict_plan", "plan_search", "plans_for", "bubble_fraction",
           "SCHEDULES", "Knobs", "KNOBS", "PRECISIONS", "RECOMPUTE", "FittedPrediction",
           "predict_fitted", "FitResult", "make_it_fit", "fitting_search",
           "RingAttention", "RingPrediction", "predict_ring", "ring_pairs", "MoE",
           "MeshPlan", "MeshPrediction", "mesh_search", "predict_mesh", "why_not"]
