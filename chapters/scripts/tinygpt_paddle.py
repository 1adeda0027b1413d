"""The sharding chapter's model in Paddle: a small GPT-style transformer, and its data
(the same sizes and batches as tinygpt_torch.py).

An embedding, BLOCKS pre-norm transformer blocks (causal self-attention, then an MLP),
a final norm and a head that predicts the next token. `TinyGPT(blocks=[...])` builds
only some of it (a pipeline stage): the embedding if the first block is there, the head
if the last is; the parts a stage lacks stay None and its forward skips them.
"""
import math

import numpy as np
import paddle
from paddle import nn

VOCAB, WIDTH, HEADS, BLOCKS, SEQ = 128, 64, 4, 4, 32   # sizes of the model
BATCH = 16                                             # sequences per training step


class Block(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        # queries, keys and values in one product, weight (in, out). No bias: a bias of
        # the keys adds the same to every score of a row, which softmax ignores; its
        # gradient would be rounding noise, which Adam scales up to full-size steps.
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias_attr=False)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(),
                                 nn.Linear(4 * WIDTH, WIDTH))

    def attention(self, x: paddle.Tensor) -> paddle.Tensor:
        b, s, _ = x.shape                                       # (b, s, width)
        # -1: the heads this copy holds (all HEADS, or a tensor-parallel rank's share)
        q, k, v = self.qkv(x).reshape([b, s, 3, -1, WIDTH // HEADS]).unbind(2)
        q, k, v = (t.transpose([0, 2, 1, 3]) for t in (q, k, v))  # (b, heads, s, d)
        scores = q @ k.transpose([0, 1, 3, 2]) / math.sqrt(WIDTH // HEADS)
        future = paddle.triu(paddle.ones([s, s]), 1).astype("bool")
        scores = paddle.where(future, paddle.full_like(scores, float("-inf")), scores)
        weights = nn.functional.softmax(scores, axis=-1)
        out = (weights @ v).transpose([0, 2, 1, 3]).reshape([b, s, -1])
        return self.proj(out)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Layer):
    def __init__(self, blocks=range(BLOCKS)) -> None:
        super().__init__()
        paddle.seed(0)      # the same initial weights in every process and stage
        full = [Block() for _ in range(BLOCKS)]     # built in full, then kept in part
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)
        # a dict keyed by the block's number: a stage's names match the full model's
        self.blocks = nn.LayerDict({str(i): full[i] for i in blocks})
        if 0 not in blocks:
            self.embed = None
        if BLOCKS - 1 not in blocks:
            self.norm = self.head = None

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        h = self.embed(x) if self.embed is not None else x   # (b, s) -> (b, s, w)
        for block in self.blocks.values():
            h = block(h)
        return self.head(self.norm(h)) if self.head is not None else h


def loss_fn(logits: paddle.Tensor, targets: paddle.Tensor) -> paddle.Tensor:
    """Mean cross-entropy of the next-token predictions."""
    return nn.functional.cross_entropy(logits.reshape([-1, VOCAB]),
                                       targets.reshape([-1]))


def batch(step: int) -> tuple[paddle.Tensor, paddle.Tensor]:
    """Step `step`'s BATCH sequences and their next tokens, the same in every process:
    token t+1 follows from token t by a rule the model can learn."""
    rng = np.random.default_rng(step)
    start = rng.integers(0, VOCAB, size=(BATCH, 1))
    stride = rng.integers(1, 8, size=(BATCH, 1))
    tokens = paddle.to_tensor((start + stride * np.arange(SEQ + 1)) % VOCAB)
    return tokens[:, :-1], tokens[:, 1:]
