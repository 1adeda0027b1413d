"""Hidden checks of assignment 12 (the public one: ``grader.checks.a12_activation_memory``).

The block the notebook describes is built here in PyTorch (``CountedBlock``) and run
forward once per case under ``torch.autograd.graph.saved_tensors_hooks``: the expected
value is the bytes of every tensor autograd saved for backward (parameters left out, a
tensor saved twice counted once), never a formula. Its dropout is ``torch.native_dropout``,
which keeps a 1-byte mask on a CPU as CUDA's dropout does (``F.dropout`` on a CPU keeps
the mask in the activations' dtype). Selective recomputation is the attention core
(scores, softmax, dropout, attention over values) run without grad in an autograd
function that saves only its inputs q, k, v and recomputes the core in backward, as a
reentrant ``torch.utils.checkpoint`` does (whose first call took 21 s on the 2-core
machine, most of a test cell's limit).

An answer may leave out the LayerNorm statistics (a mean and 1/std per token and
LayerNorm: 4 x bytes_per_value x s x b bytes), as Korthikanti et al. do; anything further
off is wrong. 5 points: without recomputation in 16-bit (2), with selective recomputation
in 16-bit (2), and both in 32-bit (1).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

from grader.checks.a12_activation_memory import as_bytes
from grader.checks.result import CheckResult
from grader.checks.support import StudentError, call, result

__all__ = ["counted_bytes", "bytes_by_rule", "CASES", "MISTAKES", "check_activation_bytes",
           "check_all"]

# (s, b, h, a): s > h in some, so that the attention term weighs
CASES = [(32, 2, 64, 4), (64, 1, 32, 2), (24, 3, 48, 6)]
WIDE = [(40, 1, 24, 3)]                                         # in float32

MISTAKES = {
    "no_scores": "the attention scores are kept too: the softmax output, its dropout mask "
                 "and the dropout output, a x s x s x b values each (5 a s^2 b bytes in "
                 "16-bit)",
    "square_h": "the score matrices are s x s per head and sample: a x s^2 x b, not "
                "a x h^2 x b",
    "square_b": "the score matrices are s x s per head and sample: a x s^2 x b, not "
                "a x s x b^2",
    "elements": "bytes, not elements: multiply the values by bytes_per_value (and a "
                "dropout mask takes 1 byte per element)",
    "mask_width": "a dropout mask takes 1 byte per element, whatever bytes_per_value is",
    "fixed_width": "use bytes_per_value: 34 and 5 are the 16-bit figures (2 bytes per value, "
                   "1 per mask element)",
    "selective_ignored": "selective recomputation drops what the attention core keeps "
                         "(5 a s^2 b bytes in 16-bit): the result must change with "
                         "selective=True",
    "selective_drops_qkv": "selective recomputation keeps the attention core's inputs q, k "
                           "and v (it recomputes from them): only the a s^2 b terms go",
}


def bytes_by_rule(s, b, h, a, w=2, selective=False, stats=True, mistakes=frozenset()):
    """The block's saved bytes by its terms, or what a typical mistake makes of them."""
    if "fixed_width" in mistakes:
        w = 2
    mask = w if "mask_width" in mistakes else 1
    sbh = s * b * h * (16 * w + 2 * mask)       # 16 values of width w, 2 masks per token
    scores = {"square_h": a * h * h * b, "square_b": a * s * b * b}.get(
        next(iter(mistakes & {"square_h", "square_b"}), ""), a * s * s * b)
    att = scores * (2 * w + mask)               # softmax output, dropout output, its mask
    total = sbh + (4 * w * s * b if stats else 0)
    drop = selective and "selective_ignored" not in mistakes
    if not drop and "no_scores" not in mistakes:
        total += att
    if selective and "selective_drops_qkv" in mistakes:
        total -= 3 * w * s * b * h
    if "elements" in mistakes:
        total = total / w
    return total


@lru_cache(maxsize=None)
def counted_bytes(s, b, h, a, w=2, selective=False) -> int:
    """Bytes the block saves for backward, counted with saved_tensors_hooks (once per
    shape in a process: the count does not depend on the values)."""
    import torch

    dtype = {2: torch.bfloat16, 4: torch.float32}[w]
    torch.manual_seed(0)
    block = _block_class()(h, a).to(dtype)
    params = {p.data_ptr() for p in block.parameters()}
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    seen: dict = {}

    def pack(t):
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if t.data_ptr() not in params:
            seen.setdefault(key, t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = block(x, selective)
    out.float().sum().backward()            # what was saved serves a real backward
    return sum(seen.values())


def _block_class():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Recomputed(torch.autograd.Function):
        """The attention core kept as its inputs only, recomputed in backward."""

        @staticmethod
        def forward(ctx, q, k, v, core):
            ctx.core, ctx.rng = core, torch.get_rng_state()   # not saved tensors
            ctx.save_for_backward(q, k, v)
            with torch.no_grad():
                return core(q, k, v)

        @staticmethod
        def backward(ctx, grad):
            inputs = [t.detach().requires_grad_() for t in ctx.saved_tensors]
            now = torch.get_rng_state()
            torch.set_rng_state(ctx.rng)                      # the same dropout mask
            with torch.enable_grad():
                out = ctx.core(*inputs)
            torch.set_rng_state(now)
            torch.autograd.backward(out, grad)
            return (*[t.grad for t in inputs], None)

    class CountedBlock(nn.Module):
        """Pre-LayerNorm GPT block: LN, QKV, attention with dropout, projection, dropout,
        residual; LN, h -> 4h, GeLU, 4h -> h, dropout, residual."""

        def __init__(self, h, a, p=0.1):
            super().__init__()
            self.a, self.p = a, p
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def core(self, q, k, v):
            scores = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
            return torch.native_dropout(scores, self.p, True)[0] @ v

        def forward(self, x, selective=False):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
            q, k, v = (t.reshape(b, s, self.a, h // self.a).transpose(1, 2) for t in (q, k, v))
            y = Recomputed.apply(q, k, v, self.core) if selective else self.core(q, k, v)
            x = x + torch.native_dropout(self.proj(y.transpose(1, 2).reshape(b, s, h)),
                                         self.p, True)[0]
            mlp = self.fc2(F.gelu(self.fc1(self.ln2(x))))
            return x + torch.native_dropout(mlp, self.p, True)[0]

    return CountedBlock


def _ok(seen: float, s, b, w, counted: int) -> bool:
    """The count, or the count without the LayerNorm statistics (4 w s b bytes)."""
    return counted - 4 * w * s * b - 0.5 <= seen <= counted + 0.5


def check_activation_bytes(fn: Callable) -> CheckResult:
    """5 points: 16-bit without recomputation (2), 16-bit with selective recomputation
    (2), 32-bit both ways (1). Each call is made on its own: an answer that raises (or
    returns no number) in one branch loses the parts whose cases call it, and only those."""
    name = "a12: activation_bytes is what the block saves for backward"
    groups = [("full", CASES, 2, False, 2, "without recomputation, 16-bit"),
              ("selective", CASES, 2, True, 2, "with selective recomputation, 16-bit"),
              ("wide", WIDE, 4, None, 1, "32-bit (bytes_per_value=4)")]
    seen, counted, errors = {}, {}, {}
    for label, cases, w, sel, _, _ in groups:
        for c in cases:
            for mode in ((False, True) if sel is None else (sel,)):
                key = (label, c, mode)
                counted[key] = counted_bytes(*c, w=w, selective=mode)
                try:
                    seen[key] = as_bytes(call(fn, *c, bytes_per_value=w, selective=mode))
                except StudentError as e:
                    errors[key] = (str(e), "call activation_bytes with these arguments in a "
                                           "cell of your own to see the error")
                except TypeError as e:
                    errors[key] = (f"not a number of bytes ({e})",
                                   "return the bytes as an int or a float")
    parts = []
    for label, cases, w, _, points, what in groups:
        keys = [k for k in counted if k[0] == label]
        if any(k in errors for k in keys):
            bad = [k for k in keys if k in errors]
            (s, b, h, a), mode = bad[0][1], bad[0][2]
            message, hint = errors[bad[0]]
            parts.append((points, False, f"{what}: {message}",
                          f"a number of bytes for s={s}, b={b}, h={h}, a={a}"
                          f"{', selective' if mode else ''}",
                          f"{len(bad)} of its {len(keys)} calls failed", hint))
            continue
        wrong = [k for k in keys if not _ok(seen[k], k[1][0], k[1][1], w, counted[k])]
        if not wrong:
            parts.append((points, True, "", "", "", ""))
            continue
        _, (s, b, h, a), mode = wrong[0]
        hint = next((text for m, text in MISTAKES.items()
                     if all(abs(seen[k] - bytes_by_rule(*k[1], w=w, selective=k[2],
                                                        mistakes={m})) <= 4 * w * k[1][0]
                            * k[1][1] + 0.5 for k in keys)), "")
        if not hint:
            hint = ("count each tensor the block keeps (the table above): 16 values of "
                    "bytes_per_value and 2 one-byte masks per token and hidden unit, and "
                    "per head 2 s x s tensors of bytes_per_value and 1 one-byte mask")
        parts.append((points, False, f"{what}: not the bytes the block saved",
                      f"{counted[wrong[0]]:,} bytes counted for s={s}, b={b}, h={h}, a={a}"
                      f"{', selective' if mode else ''}",
                      f"{seen[wrong[0]]:,.0f}", hint))
    return result(name, 5, parts, f"all {len(counted)} shapes match the bytes counted with "
                                  "saved_tensors_hooks")


def check_all(fn: Callable) -> list[CheckResult]:
    return [check_activation_bytes(fn)]
