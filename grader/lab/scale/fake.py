"""One training step of a layout at cluster scale, on this machine: PyTorch's own
accounting of what rank 0 of ``layout.ranks`` ranks holds and sends.

The capstone's model (chapters/scripts/capstone_torch.py: ``Model``, ``apply_tp``,
``apply_pp``, ``apply_fsdp``, its ``CommSizes`` counter; imported from the script, not
copied) is built at the sizes asked for on the ``meta`` device, so no weight is ever
allocated; the same parallelize functions run on a device mesh of a *fake* process
group (``backend="fake"``, ``FakeStore``: one process plays rank 0, every collective
returns at once and moves nothing); the model is then materialised under
``FakeTensorMode`` (tensors with shapes and no data) and one step of Adam runs under
``FSDPMemTracker``, which files every tensor the step creates under a kind (sharded and
gathered parameters, gradients, optimizer states, activations, temporaries, FSDP's
communication buffers), and under the capstone's ``CommSizes`` (``CommDebugMode``'s
count of collectives, with their bytes).

Three things keep the accounting true, each found while writing this module:

- the step runs inside ``FakeTensorMode`` (so that FSDP's buffers and every other new
  tensor are fake too: outside it, FSDP allocated its gather buffers for real), but
  DTensor's dry runs of each operation at the global shapes get a fake mode of their
  own (:func:`_propagation_apart`): in the tracker's, they were counted as this rank's;
- Adam's states are made before the tracked step, as its first step leaves them (in
  the first step itself they do not exist until its end, after the peak);
- each kind is kept at its own peak over the step (:class:`Tracked.memory`), each
  tensor counted under the kind it ended up in (:class:`_Ledger`), beside the kinds at
  the moment the total peaks (:class:`Tracked.at_peak`): the planner adds up each kind
  at its largest, which a step never holds at once.

These are PyTorch's private modules (``torch.distributed._tools``,
``torch.testing._internal``): this was written against torch 2.13.0
(:data:`TORCH_VERSION`); :attr:`Tracked.torch_version` is the version that ran.
"""
from __future__ import annotations

import contextlib
import importlib.util
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from grader.lab.planner.composed import DIM_NAMES, Layout
from grader.lab.planner.sharded import Transformer

__all__ = ["TORCH_VERSION", "KINDS", "Tracked", "track", "release", "capstone_script"]

TORCH_VERSION = "2.13.0"
MAX_RANKS = 512                 # the fake world's size: layouts of up to 512 ranks
KINDS = ("params", "grads", "optimizer", "activations", "temporaries")
SCRIPT = Path(__file__).resolve().parents[3] / "chapters" / "scripts" / "capstone_torch.py"

# the trackers' kinds (FSDPMemTracker's and MemTracker's names) in the planner's words;
# FSDP's all-gather and reduce-scatter buffers live for one collective: temporaries
_KIND_OF = {"Sharded Param": "params", "Unsharded Param": "params", "Parameter": "params",
            "Sharded Grad": "grads", "Unsharded Grad": "grads", "Gradient": "grads",
            "OptState": "optimizer", "Optstate": "optimizer",
            "Activation": "activations", "Inputs": "activations",
            "Temp": "temporaries", "All Gather": "temporaries",
            "Reduce Scatter": "temporaries", "Buffer": "temporaries",
            "Other": "temporaries"}


@dataclass
class Tracked:
    """Rank 0's step, as PyTorch accounted for it."""

    layout: Layout
    model: Transformer            # the sizes built: ``blocks`` as tracked
    memory: dict[str, int]        # bytes of each kind at its own peak in the step
    at_peak: dict[str, int]       # bytes of each kind when the total peaked
    peak: int                     # the total's peak, bytes
    collectives: list[tuple[str, int]] = field(default_factory=list)  # (op, bytes)
    largest: dict[str, int] = field(default_factory=dict)   # largest tensor, by kind
    in_flight: int = 1            # micro-batches whose activations a stage holds
    seconds: float = 0.0
    torch_version: str = ""

    def counts(self) -> dict[str, int]:
        """Collectives of the step by operation (the capstone's names)."""
        out: dict[str, int] = {}
        for op, _ in self.collectives:
            out[op] = out.get(op, 0) + 1
        return out


def capstone_script():
    """A fresh copy of chapters/scripts/capstone_torch.py as a module: its sizes are
    module constants, set per call here without touching anyone else's copy."""
    spec = importlib.util.spec_from_file_location("_capstone_torch_scaled", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_world(ranks: int) -> None:
    """Rank 0 of a fake process group of at least ``ranks`` ranks. One world serves
    every layout: a layout's mesh takes its first ``ranks`` ranks. (A world destroyed
    and made again leaves DTensor's caches holding meshes whose groups are gone: the
    fourth layout of a run failed so, "Could not resolve the process group";
    :func:`release` ends a world and clears those caches.)"""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        if dist.get_backend() == "fake" and dist.get_world_size() >= ranks:
            return
        raise RuntimeError(f"this process already has a process group "
                           f"({dist.get_backend()}, {dist.get_world_size()} ranks): "
                           f"track() needs a fake one of at least {ranks} ranks; "
                           f"call it in a fresh process")
    # an earlier world of this process (another module's) may have left DTensor's
    # caches holding its meshes: they go with it
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _clear_sharding_prop_cache()
    dist.init_process_group("fake", rank=0, world_size=max(ranks, MAX_RANKS),
                            store=FakeStore())


def release() -> None:
    """End the fake process group and forget DTensor's cached shardings, whose meshes
    name its groups (a test that tracks, then leaves the process to others)."""
    import torch.distributed as dist
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    if dist.is_initialized() and dist.get_backend() == "fake":
        dist.destroy_process_group()
    _clear_sharding_prop_cache()          # Python's cache and the C++ fast path's


@contextlib.contextmanager
def _propagation_apart():
    """DTensor works out an operation's output sharding by running it at the global
    shapes under a fake mode: the active one if there is one. The tracker counts what
    runs under the fake mode it was entered in, so it filed those whole-size dry runs
    as this rank's (Adam's update under FSDP x TP: 5.9 GB of "optimizer states" for
    29 MB). Here DTensor gets a fake mode of its own for them, which the tracker
    leaves out."""
    from torch.distributed.tensor import _sharding_prop

    detect = _sharding_prop.detect_fake_mode
    _sharding_prop.detect_fake_mode = lambda *args, **kwargs: None
    try:
        yield
    finally:
        _sharding_prop.detect_fake_mode = detect


class _Ledger:
    """Every change the tracker makes to its books, replayed afterwards with each
    tensor under the kind it ended up in. The tracker files a new tensor under the
    phase that made it and moves it when it learns better: the embedding's gradient
    is a temporary of the backward until autograd hands it over. Summed as filed, the
    temporaries of FSDP-64 x TP-8 (2 blocks) peaked at 2.33 GiB with that gradient
    (1.96 GiB) among them; counted where it ended, at 1.96 GiB."""

    def __init__(self, tracker) -> None:
        self.events: list[tuple[object, int]] = []     # (tensor's record, bytes added)
        update = tracker._update_snap

        def _update_snap(u_type, winfo, old_mem_consumed=None, old_reftype=None):
            update(u_type, winfo, old_mem_consumed, old_reftype)
            if u_type.name == "ADD":
                self.events.append((winfo, winfo.mem_consumed))
            elif u_type.name == "DEL":
                self.events.append((winfo, -winfo.mem_consumed))
            elif u_type.name == "SIZE":
                self.events.append((winfo, winfo.mem_consumed - old_mem_consumed))

        tracker._update_snap = _update_snap

    def replay(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """Each kind at its own peak, the kinds when the total peaked, and the largest
        single tensor of each kind."""
        now, peaks = dict.fromkeys(KINDS, 0), dict.fromkeys(KINDS, 0)
        largest, at_peak, total, top = dict.fromkeys(KINDS, 0), dict(now), 0, -1
        for winfo, delta in self.events:
            kind = _KIND_OF[winfo.reftype.value]
            now[kind] += delta
            total += delta
            peaks[kind] = max(peaks[kind], now[kind])
            largest[kind] = max(largest[kind], winfo.mem_consumed)
            if total > top:
                top, at_peak = total, dict(now)
        return peaks, at_peak, largest


def track(layout: Layout, model: Transformer, blocks: int | None = None,
          micro: int | None = None, update: bool = False) -> Tracked:
    """One Adam step of rank 0 of ``layout`` on ``model``'s sizes, with ``blocks`` of
    its blocks (default: all): forward and backward with Adam's states in memory, and
    with ``update`` Adam's update too (the slowest part to track: DTensor works out the
    sharding of each of its operations on every parameter; its intermediate results
    are filed as optimizer memory, and the total peaks in the backward, before it).

    A pipeline's rank runs its stage alone (the first, which holds the most
    activations): the forwards of the micro-batches 1F1B keeps in flight there
    (``min(pp, micro)``, ``micro`` the layout's unless given), then their backwards;
    the stages' sends are not made."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import FSDPModule

    if model.itemsize != 4:
        raise ValueError("the capstone's model trains in float32: itemsize 4")
    blocks = model.blocks if blocks is None else blocks
    micro = layout.micro if micro is None else micro
    tracked_model = Transformer(model.vocab, model.width, model.heads, blocks, model.seq,
                                model.batch, model.itemsize, model.opt_states)
    problems = layout.check(tracked_model)
    if problems:
        raise ValueError(f"{layout.text} ({layout}): " + "; ".join(problems))
    start = time.perf_counter()
    ct = capstone_script()
    ct.VOCAB, ct.WIDTH, ct.HEADS, ct.BLOCKS, ct.SEQ = (model.vocab, model.width,
                                                       model.heads, blocks, model.seq)
    _fake_world(layout.ranks)
    mesh = DeviceMesh("cpu", torch.arange(layout.ranks).view(layout.mesh_shape),
                      mesh_dim_names=DIM_NAMES)
    with torch.device("meta"):                       # sizes only: nothing allocated
        net = ct.Model()
    ct.apply_tp(net, mesh["tp"])                     # the capstone's order: tensor,
    net = ct.apply_pp(net, mesh["pp"])               # pipeline, then FSDP / data
    ct.apply_fsdp(net, mesh["dp_replicate", "dp_shard"] if layout.replicate > 1
                  else mesh["dp_shard"])
    rows = model.batch // layout.dp                  # this rank's sequences
    in_flight = min(layout.pp, micro) if layout.pp > 1 else 1
    per_micro = rows // micro if layout.pp > 1 else rows
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake:
        net.to_empty(device="cpu")                   # fake tensors of the shards' shapes
        opt = torch.optim.Adam(net.parameters(), lr=1e-4)
        for p in net.parameters():                   # Adam's states, as after a step
            opt.state[p] = {"step": torch.tensor(1.0), "exp_avg": torch.zeros_like(p),
                            "exp_avg_sq": torch.zeros_like(p)}
        x = [torch.randint(0, model.vocab, (per_micro, model.seq))
             for _ in range(in_flight)]
        y = [torch.randint(0, model.vocab, (per_micro, model.seq))
             for _ in range(in_flight)]
    # the step, in the fake mode (FSDP's buffers, the mask, every new tensor: fake)
    if isinstance(net, FSDPModule):
        tracker = FSDPMemTracker(net, opt)
    else:                                            # no data-parallel axis
        tracker = MemTracker()
        tracker.track_external(net, opt)
    ledger = _Ledger(tracker)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fake, _propagation_apart(), tracker, ct.CommSizes() as comm:
            if layout.pp == 1:
                loss = ct.loss_fn(net(x[0]), y[0])
                loss.backward()
            else:
                outs = _first_stage(net)(x)
                for i, out in enumerate(outs):
                    # as PipelineStage runs FSDP: gradients reduced and parameters
                    # freed once, after the last micro-batch's backward
                    last = i == len(outs) - 1
                    if isinstance(net, FSDPModule):
                        net.set_is_last_backward(last)
                        net.set_reshard_after_backward(last)
                        net.set_requires_gradient_sync(last)
                    out.backward(torch.ones_like(out))
            if update:
                opt.step()
    snap = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
    peaks, at_peak, largest = ledger.replay()
    return Tracked(layout, tracked_model, peaks, at_peak, snap["Total"],
                   list(comm.ops), largest, in_flight, time.perf_counter() - start,
                   torch.__version__.split("+")[0])


def _first_stage(net):
    """The first stage of a pipeline as 1F1B runs it at its fullest: the forwards of the
    micro-batches in flight, then (the caller) their backwards, the gradient arriving
    from the next stage being ones of the output's shape. A module around the stage,
    so that the trackers see the stage called once per micro-batch inside it, not a
    new step each time."""
    from torch import nn

    class FirstStage(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stage = net

        def forward(self, xs):
            return [self.stage(x) for x in xs]

    return FirstStage()
