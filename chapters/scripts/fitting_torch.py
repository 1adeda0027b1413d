"""The fitting chapter's experiments on TinyGPT (tinygpt_torch.py), in one process:

- `SavedTensors`: every tensor autograd keeps for the backward pass, counted with
  `torch.autograd.graph.saved_tensors_hooks`, by layer and over the step;
- `forward`: the model's forward pass with no recomputation, with selective recomputation
  (each block's attention core, whose saved tensors grow with seq^2, is recomputed in
  backward) or full recomputation (every block is recomputed: `checkpoint` per block, or
  `checkpoint_sequential` over the stack of blocks);
- `train`: a few Adam steps in any of these, in float32 or under `torch.autocast`.
"""
import math
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from tinygpt_torch import HEADS, WIDTH, Block, TinyGPT, batch, loss_fn

MODES = ("none", "selective", "full", "sequential")


class Saved:
    """What the pack hook keeps in autograd's graph: the tensor and its memory's key."""

    def __init__(self, ptr: int | None, tensor: torch.Tensor) -> None:
        self.ptr, self.tensor = ptr, tensor


class SavedTensors:
    """While `hooks()` is active, counts what autograd saves for backward: bytes per
    layer, and the bytes held over time (a tensor counts from the moment it is saved to
    the moment backward last reads it). Storage is counted once however many views of it
    are saved; the weights (saved by every product) are no new memory and are left out."""

    def __init__(self, model: TinyGPT) -> None:
        self.weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.layer = "embedding"
        self.by_layer: dict[str, dict[int, int]] = {}   # layer -> {storage: bytes}
        self.shapes: list[tuple[str, tuple, str, int]] = []
        self.uses: dict[int, list[int]] = {}            # storage -> [reads left, bytes]
        self.curve: list[tuple[float, int]] = []        # (seconds, bytes held)
        self.start = time.perf_counter()
        self.forward = True
        for name, block in model.blocks.items():
            block.register_forward_pre_hook(lambda *_, n=name: self.enter(f"block {n}"))
        model.norm.register_forward_pre_hook(lambda *_: self.enter("head"))

    def enter(self, layer: str) -> None:
        if self.forward:                 # (a recomputed block runs its forward again)
            self.layer = layer

    def held(self) -> int:
        return sum(nbytes for _, nbytes in self.uses.values())

    def pack(self, t: torch.Tensor):     # autograd saves `t` for the backward pass
        ptr = t.untyped_storage().data_ptr()
        if ptr in self.weights:
            return Saved(None, t)
        nbytes = t.untyped_storage().nbytes()
        layer = self.by_layer.setdefault(self.layer, {})
        if ptr not in layer:             # (shape, dtype) of each memory, once a layer
            self.shapes.append((self.layer, tuple(t.shape), str(t.dtype), nbytes))
        layer[ptr] = nbytes
        self.uses.setdefault(ptr, [0, nbytes])[0] += 1
        self.curve.append((time.perf_counter() - self.start, self.held()))
        return Saved(ptr, t)

    def unpack(self, packed) -> torch.Tensor:   # backward reads it back
        ptr, t = packed.ptr, packed.tensor
        if ptr is not None and ptr in self.uses:
            self.uses[ptr][0] -= 1
            if self.uses[ptr][0] == 0:
                del self.uses[ptr]
            self.curve.append((time.perf_counter() - self.start, self.held()))
        return t

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def layers(self) -> dict[str, int]:
        return {layer: sum(s.values()) for layer, s in self.by_layer.items()}

    def total(self) -> int:
        return sum(self.layers().values())


def attention_core(q, k, v):
    """Scores, causal softmax and the weighted sum of the values: (b, heads, s, d)."""
    s = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(WIDTH // HEADS)
    future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v


class SelectiveBlock(Block):
    """A block that keeps what its products need and recomputes the attention core in
    backward (Korthikanti et al.'s selective recomputation)."""

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, WIDTH // HEADS).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))         # (b, heads, s, d)
        out = checkpoint(attention_core, q, k, v, use_reentrant=False)
        return self.proj(out.transpose(1, 2).reshape(b, s, WIDTH))


def selective(model: TinyGPT) -> TinyGPT:
    """The model with SelectiveBlocks carrying its blocks' weights."""
    for name, block in model.blocks.items():
        new = SelectiveBlock()
        new.load_state_dict(block.state_dict())
        model.blocks[name] = new
    return model


def forward(model: TinyGPT, x: torch.Tensor, mode: str = "none") -> torch.Tensor:
    """The logits, recomputing as `mode` says (a selective model recomputes by itself)."""
    h = model.embed(x)
    blocks = list(model.blocks.values())
    if mode == "full":                  # keep each block's input, recompute the rest
        for block in blocks:
            h = checkpoint(block, h, use_reentrant=False)
    elif mode == "sequential":          # 2 segments; the last one is not checkpointed
        h = checkpoint_sequential(nn.Sequential(*blocks), 2, h, use_reentrant=False)
    else:
        for block in blocks:
            h = block(h)
    return model.head(model.norm(h))


def build(mode: str = "none") -> TinyGPT:
    model = TinyGPT()
    return selective(model) if mode == "selective" else model


def train(steps: int, mode: str = "none", dtype: torch.dtype | None = None,
          lr: float = 3e-3):
    """`steps` Adam steps on the chapter's batches; under `torch.autocast` with
    `dtype` if given. Returns the model and the losses."""
    model = build(mode)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        x, y = batch(step)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16,
                            enabled=dtype is not None):
            loss = loss_fn(forward(model, x, mode), y)
        loss.backward()               # outside autocast: backward runs in the
        opt.step()                    # forward's dtypes; the weights stay float32
        opt.zero_grad()
        losses.append(loss.item())
    return model, losses


def step_times(modes=MODES, repeats: int = 7) -> dict[str, list[float]]:
    """Seconds of one forward and backward pass in each mode. The modes take turns (one
    of each per round, after a warm-up round), so that a busy machine slows all alike.
    (On a GPU, synchronize the device before each clock read.)"""
    models = {mode: build(mode) for mode in modes}
    x, y = batch(0)
    times = {mode: [] for mode in modes}
    for round_ in range(repeats + 1):
        for mode in modes:
            start = time.perf_counter()
            loss_fn(forward(models[mode], x, mode), y).backward()
            if round_:
                times[mode].append(time.perf_counter() - start)
    return times
