"""The fitting chapter's experiments on TinyGPT in Paddle (tinygpt_paddle.py), in one
process:

- `SavedTensors`: every tensor autograd keeps for the backward pass, counted with
  `paddle.autograd.saved_tensors_hooks`, by layer and over the step;
- `forward`: the model's forward pass with no recomputation, with selective recomputation
  (each block's attention core, whose saved tensors grow with seq^2, is recomputed in
  backward) or full recomputation (every block is recomputed: fleet's `recompute` per
  block, or `recompute_sequential` over the stack of blocks);
- `train`: a few Adam steps in any of these.
"""
import math
import time

import paddle
from paddle import nn
from paddle.distributed.fleet.utils import recompute
from paddle.incubate.distributed.fleet import recompute_sequential

from tinygpt_paddle import HEADS, WIDTH, Block, TinyGPT, batch, loss_fn

MODES = ("none", "selective", "full")   # recompute_sequential: see the chapter


class Saved:
    """What the pack hook keeps in autograd's graph: the tensor and its memory's key."""

    def __init__(self, ptr: int | None, tensor: paddle.Tensor) -> None:
        self.ptr, self.tensor = ptr, tensor


class SavedTensors:
    """While `hooks()` is active, counts what autograd saves for backward: bytes per
    layer, and the bytes held over time (a tensor counts from the moment it is saved to
    the moment backward last reads it). Memory is counted once however many times it is
    saved; the weights (saved by every product) are no new memory and are left out."""

    def __init__(self, model: TinyGPT) -> None:
        self.weights = {p.data_ptr() for p in model.parameters()}
        self.layer = "embedding"
        self.by_layer: dict[str, dict[int, int]] = {}   # layer -> {memory: bytes}
        self.shapes: list[tuple[str, tuple, str, int]] = []
        self.uses: dict[int, list[int]] = {}            # memory -> [reads left, bytes]
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

    def pack(self, t: paddle.Tensor):    # autograd saves `t` for the backward pass
        ptr = t.data_ptr()
        if ptr in self.weights:
            return Saved(None, t)
        nbytes = t.numel().item() * t.element_size()
        layer = self.by_layer.setdefault(self.layer, {})
        if ptr not in layer:             # (shape, dtype) of each memory, once a layer
            self.shapes.append((self.layer, tuple(t.shape), str(t.dtype), nbytes))
        layer[ptr] = nbytes
        self.uses.setdefault(ptr, [0, nbytes])[0] += 1
        self.curve.append((time.perf_counter() - self.start, self.held()))
        return Saved(ptr, t)

    def unpack(self, packed) -> paddle.Tensor:  # backward reads it back
        ptr, t = packed.ptr, packed.tensor
        if ptr is not None and ptr in self.uses:
            self.uses[ptr][0] -= 1
            if self.uses[ptr][0] == 0:
                del self.uses[ptr]
            self.curve.append((time.perf_counter() - self.start, self.held()))
        return t

    def hooks(self):
        return paddle.autograd.saved_tensors_hooks(self.pack, self.unpack)

    def layers(self) -> dict[str, int]:
        return {layer: sum(s.values()) for layer, s in self.by_layer.items()}

    def total(self) -> int:
        return sum(self.layers().values())


def attention_core(q, k, v):
    """Scores, causal softmax and the weighted sum of the values: (b, heads, s, d)."""
    s = q.shape[-2]
    scores = q @ k.transpose([0, 1, 3, 2]) / math.sqrt(WIDTH // HEADS)
    future = paddle.triu(paddle.ones([s, s]), 1).astype("bool")
    scores = paddle.where(future, paddle.full_like(scores, float("-inf")), scores)
    return nn.functional.softmax(scores, axis=-1) @ v


class SelectiveBlock(Block):
    """A block that keeps what its products need and recomputes the attention core in
    backward (Korthikanti et al.'s selective recomputation)."""

    def attention(self, x: paddle.Tensor) -> paddle.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).reshape([b, s, 3, HEADS, WIDTH // HEADS]).unbind(2)
        q, k, v = (t.transpose([0, 2, 1, 3]) for t in (q, k, v))  # (b, heads, s, d)
        out = recompute(attention_core, q, k, v)
        return self.proj(out.transpose([0, 2, 1, 3]).reshape([b, s, WIDTH]))


def selective(model: TinyGPT) -> TinyGPT:
    """The model with SelectiveBlocks carrying its blocks' weights."""
    for name in list(model.blocks.keys()):
        new = SelectiveBlock()
        new.set_state_dict(model.blocks[name].state_dict())
        model.blocks[name] = new
    return model


def forward(model: TinyGPT, x: paddle.Tensor, mode: str = "none") -> paddle.Tensor:
    """The logits, recomputing as `mode` says (a selective model recomputes by itself)."""
    h = model.embed(x)
    blocks = list(model.blocks.values())
    if mode == "full":                  # keep each block's input, recompute the rest
        for block in blocks:
            h = recompute(block, h)
    elif mode == "sequential":          # 2 segments; the last one is not recomputed
        # (Paddle 3.3 passes the first segment's output on as *args: a lone tensor is
        # split into its rows, and the second segment fails; the chapter shows it)
        h = recompute_sequential({"segments": 2}, nn.Sequential(*blocks), h)
    else:
        for block in blocks:
            h = block(h)
    return model.head(model.norm(h))


def build(mode: str = "none") -> TinyGPT:
    model = TinyGPT()
    return selective(model) if mode == "selective" else model


def train(steps: int, mode: str = "none", dtype: str | None = None, lr: float = 3e-3):
    """`steps` Adam steps on the chapter's batches; under `paddle.amp.auto_cast` with
    `dtype` ("bfloat16", "float16") if given. Returns the model and the losses."""
    model = build(mode)
    opt = paddle.optimizer.Adam(learning_rate=lr, parameters=model.parameters())
    losses = []
    for step in range(steps):
        x, y = batch(step)
        with paddle.amp.auto_cast(enable=dtype is not None, dtype=dtype or "bfloat16"):
            loss = loss_fn(forward(model, x, mode), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
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
