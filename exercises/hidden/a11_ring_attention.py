"""Hidden checks of assignment 11 (the public ones: ``grader.checks.a11_ring_attention``).

Both tasks are compared with attention computed here in float64 NumPy over all the keys
at once (``attention_over_keys``), on inputs the judge draws from fixed seeds and hands the
answer as float32 tensors of the student's framework. The typical mistakes are written
here as switches of the same computation (``merge_by_rule``, ``ring_by_rule``), so that a
wrong answer's first hint names the mistake whose output it reproduces.

Task 1 (6 points): two partials over ordinary keys merge to the attention over both: the
output (2) and the lse (1); large logits, where exp(lse) overflows float32 (1); rows with
no key in one part (1) and in both parts (1): lse -inf, output 0, no NaN.
Task 2 (6 points): equal blocks without a mask (2; among them a long sequence, paid only
within a ring's memory), uneven blocks (1), a causal mask
(whole future blocks masked) (1), rows with no key at all (1), large logits (1). Task 2
teaches a process, and the grader watches it before it pays for the output: it calls
``ring_attention(q, k_blocks, v_blocks, masks, merge=<the grader's merge>)``, and its merge
(trusted code: it computes the merge itself, in float64) records every call. A case's
points are paid only when the calls show the ring: one merge per block (or per block after
the first, when the first block's partial is the start), each folding in one block's
partial (a mean of that block's values, right or not) into the previous
merge's result, and the answer returning the last merge's result. An answer that
concatenates the blocks and takes one softmax calls no merge and is paid nothing; and a
wrong task-1 merge no longer costs task 2 its points.

The memory a call takes is observed too, because a ring exists so that no rank holds the
whole score matrix: an answer that merges block after block but computes ``q @ (all the
keys)`` once beside the ring (to check something, for each row's largest score) has the
right numbers and the right merges. The equal-blocks part has a long sequence
(:data:`MEMORY_CASE`: 256 queries against 64 blocks of 1,024 keys; the whole score matrix
64 MB in float32, one block's 1 MB), and its points are paid only when what the call added
to memory at its peak stays below :func:`memory_bound` (8 blocks' scores with their
partials, 4 copies of the inputs, 16 MB for the framework's first large operations: 36 MB).
The peak is measured by trusted code the student's cannot reach
(:func:`grader.grading.judge.meter.peak_of`): graded, the kernel's own control group, whose
peak counter the judge opened before it gave up root and resets around the call; the
kernel's code can neither write it nor leave the group, and a child process it starts is
counted too. Measured (2026-12-06): honest rings 13 to 25 MB (PyTorch and Paddle, in the
kernel and in one process), the whole score matrix beside the ring 63 to 76 MB. A graded
run on a machine without a memory control group does not measure it and says so in the
feedback. Not caught: memory the notebook took before the call (a buffer made in an
earlier cell and filled by the call) is not the call's.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import numpy as np

from grader.checks.a11_ring_attention import framework_problem, read_pair, to_numpy, to_tensor
from grader.checks.result import CheckResult
from grader.checks.support import StudentError, call, result
from grader.grading.judge.meter import Reading, in_kernel, peak_of

__all__ = ["attention_over_keys", "merge_by_rule", "partial_by_rule", "ring_by_rule",
           "MERGE_MISTAKES", "RING_MISTAKES", "check_merge", "check_ring_attention",
           "check_all", "recording_merge", "ring_process", "MEMORY_CASE", "memory_bound"]

RTOL, ATOL = 1e-4, 1e-4
LARGE_ATOL = 2e-3          # float32 scores of ~1000 carry errors of ~1e-4 each
# A row with no key has lse -inf; an lse below this counts as -inf too: float32 has no
# normal number below exp(-87.3), and Paddle 3.3.1's CPU exp(-inf) gives 2.9e-39 in
# vectorised lanes (0 in the others), so an honest Paddle answer ends near -87.3.
NO_KEY_LSE = -80.0

MERGE_MISTAKES = {
    "average": "the two partial outputs are weighted by their share of the softmax mass, "
               "exp(lse1 - lse) and exp(lse2 - lse), not averaged",
    "lse_max": "the merged lse is log(exp(lse1) + exp(lse2)), not the larger of the two",
    "lse_sum": "the merged lse is log(exp(lse1) + exp(lse2)), not lse1 + lse2",
    "no_max": "exp(lse) overflows float32 past lse = 88: subtract the larger lse of each row "
              "before exponentiating (m = max(lse1, lse2); exp(lse1 - m), exp(lse2 - m))",
    "nan_masked": "a row with no key in either part has lse1 = lse2 = -inf, and "
                  "-inf - (-inf) is NaN: keep such rows at lse -inf and output 0 (replace "
                  "an infinite max by 0 before subtracting it)",
}
RING_MISTAKES = {
    "no_scale": "scale the scores by 1/sqrt(d): scores = q k^T / sqrt(d)",
    "ignore_mask": "leave the masked-out keys out: set their scores to -inf before the "
                   "softmax",
    "mask_zero": "a masked-out score is -inf (left out of the softmax), not 0 (which "
                 "still counts as exp(0) = 1)",
    "init_zero": "start from no keys at all: lse = -inf (exp(-inf) = 0) and o = 0 (or from "
                 "the first block's partial), not lse = 0",
    "nan_masked": "a row whose keys in a block are all masked has no softmax (0 / 0 is NaN): "
                  "give it lse -inf and output 0 in that block",
    "no_max": "exp(scores) overflows float32 past 88: subtract each row's largest score "
              "before exponentiating (as logsumexp and softmax do)",
}
NAN_NO_KEY = ("a row with no allowed key (in a block, or at all) must not give NaN: give "
              "it lse -inf and output 0 (paddle.logsumexp and softmax of a row of -inf give "
              "NaN; torch.softmax does too)")


# -- the computations, with the mistakes as switches ------------------------------------
def attention_over_keys(q, k, v, mask=None):
    """Softmax attention of q over all keys at once (float64): ``(o, lse)``; a row with
    no allowed key gets o = 0 and lse = -inf."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = q @ k.T / np.sqrt(q.shape[1])
    if mask is not None:
        s = np.where(np.asarray(mask, bool), s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(s - m)
    total = w.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = (m + np.log(total))[:, 0]
    o = (w @ v) / np.where(total > 0, total, 1.0)
    return o, lse


def merge_by_rule(o1, lse1, o2, lse2, mistakes=frozenset()):
    """The merge (float64), or what each typical mistake makes of it."""
    o1, lse1, o2, lse2 = (np.asarray(a, np.float64) for a in (o1, lse1, o2, lse2))
    with np.errstate(all="ignore"):
        if "no_max" in mistakes:
            w1, w2 = np.exp(lse1.astype(np.float32)), np.exp(lse2.astype(np.float32))
            w1, w2 = w1.astype(np.float64), w2.astype(np.float64)
            m = np.zeros_like(lse1)
        else:
            m = np.maximum(lse1, lse2)
            if "nan_masked" not in mistakes:
                m = np.where(np.isfinite(m), m, 0.0)
            w1, w2 = np.exp(lse1 - m), np.exp(lse2 - m)
        total = w1 + w2
        lse = m + np.log(total)
        if "average" in mistakes:
            o = (o1 + o2) / 2
        elif "no_max" in mistakes or "nan_masked" in mistakes:
            o = (w1[:, None] * o1 + w2[:, None] * o2) / total[:, None]
        else:
            o = (w1[:, None] * o1 + w2[:, None] * o2) / np.where(total > 0, total, 1.0)[:, None]
    if "lse_max" in mistakes:
        lse = np.maximum(lse1, lse2)
    if "lse_sum" in mistakes:
        lse = lse1 + lse2
    return o, lse


def partial_by_rule(q, k, v, mask=None, mistakes=frozenset()):
    """One block's partial result (float64), or a typical mistake's."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = q @ k.T / (1.0 if "no_scale" in mistakes else np.sqrt(q.shape[1]))
    if mask is not None and "ignore_mask" not in mistakes:
        s = np.where(np.asarray(mask, bool), s, 0.0 if "mask_zero" in mistakes else -np.inf)
    with np.errstate(all="ignore"):
        if "no_max" in mistakes:
            w = np.exp(s.astype(np.float32)).astype(np.float64)
            m = np.zeros((s.shape[0], 1))
        else:
            m = s.max(axis=1, keepdims=True)
            m = np.where(np.isfinite(m), m, 0.0)
            w = np.exp(s - m)
        total = w.sum(axis=1, keepdims=True)
        lse = (m + np.log(total))[:, 0]
        if "nan_masked" in mistakes or "no_max" in mistakes:
            o = (w @ v) / total
        else:
            o = (w @ v) / np.where(total > 0, total, 1.0)
    return o, lse


def ring_by_rule(q, k_blocks, v_blocks, masks=None, mistakes=frozenset()):
    """Ring attention (float64): each block's partial folded in with the merge."""
    n, dv = np.asarray(q).shape[0], np.asarray(v_blocks[0]).shape[1]
    o, lse = np.zeros((n, dv)), np.full(n, 0.0 if "init_zero" in mistakes else -np.inf)
    for i, (k, v) in enumerate(zip(k_blocks, v_blocks)):
        ob, lb = partial_by_rule(q, k, v, None if masks is None else masks[i], mistakes)
        o, lse = merge_by_rule(o, lse, ob, lb, mistakes & {"average", "lse_max", "lse_sum"})
    return o, lse


def _same(seen, want, atol=ATOL) -> bool:
    """Equal within tolerance, -inf where -inf is expected, and no NaN where none is."""
    seen, want = np.asarray(seen, np.float64), np.asarray(want, np.float64)
    if seen.shape != want.shape:
        return False
    seen = np.where(np.isneginf(want) & (seen <= NO_KEY_LSE), -np.inf, seen)
    return bool(np.allclose(seen, want, rtol=RTOL, atol=atol, equal_nan=True))


# -- task 1: merge ------------------------------------------------------------------------
def _draw(seed: int, n: int, sizes: tuple, d: int = 8, dv: int = 4, scale: float = 1.0,
          dead_rows: dict | None = None, causal_at: int | None = None):
    """q, key/value blocks and masks: ``dead_rows`` {block: rows} masks those rows of a
    block entirely; ``causal_at`` puts the query block at that position of the sequence."""
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((n, d)) * scale).astype(np.float32)
    ks = [(rng.standard_normal((m, d)) * scale).astype(np.float32) for m in sizes]
    vs = [rng.standard_normal((m, dv)).astype(np.float32) for m in sizes]
    masks = None
    if dead_rows is not None:
        masks = [np.ones((n, m), bool) for m in sizes]
        for b, rows in dead_rows.items():
            masks[b][list(rows)] = False
    if causal_at is not None:
        q_pos = causal_at + np.arange(n)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        masks = [(start + np.arange(m))[None, :] <= q_pos[:, None]
                 for start, m in zip(starts, sizes)]
    return q, ks, vs, masks


def _full(q, ks, vs, masks):
    return attention_over_keys(q, np.concatenate(ks), np.concatenate(vs),
                               None if masks is None else np.concatenate(masks, axis=1))


# (label, draw): two blocks each, merged once
MERGE_CASES = {
    "plain": [dict(seed=11, n=5, sizes=(4, 6)), dict(seed=12, n=3, sizes=(1, 3))],
    "large": [dict(seed=13, n=4, sizes=(5, 3), scale=20.0)],
    "one_side": [dict(seed=14, n=4, sizes=(3, 5), dead_rows={0: (1, 3)}),
                 dict(seed=15, n=3, sizes=(2, 2), dead_rows={1: (0,)})],
    "both": [dict(seed=16, n=4, sizes=(3, 3), dead_rows={0: (0, 2), 1: (2, 3)})],
}


def _merge_inputs(case: dict):
    q, ks, vs, masks = _draw(**case)
    parts = [attention_over_keys(q, k, v, None if masks is None else masks[i])
             for i, (k, v) in enumerate(zip(ks, vs))]
    (o1, l1), (o2, l2) = parts
    as32 = [np.asarray(a, np.float32) for a in (o1, l1, o2, l2)]
    return as32, _full(q, ks, vs, masks)


def check_merge(fn: Callable, framework: str = "torch") -> CheckResult:
    """6 points: ordinary partials' output (2) and lse (1); large logits (1); rows with no
    key in one part (1) and in both (1)."""
    name = "a11: merge combines two partial attention results"
    if (bad := framework_problem(name, 6, framework)) is not None:
        return bad
    got = {}
    try:
        for label, cases in MERGE_CASES.items():
            for i, case in enumerate(cases):
                args, want = _merge_inputs(case)
                out = call(fn, *[to_tensor(framework, a) for a in args])
                got[(label, i)] = (args, want, read_pair(out, *want[0].shape))
    except StudentError as e:
        return CheckResult(name, 0, 6, str(e), hint="run the public check above")
    except (TypeError, ValueError) as e:
        return CheckResult(name, 0, 6, "not a pair (o, lse) of the right shapes",
                           seen=str(e), hint="return o, lse: o of shape (n, dv), lse (n,)")

    def first_wrong(label, which, atol=ATOL):
        for (lab, i), (args, want, seen) in got.items():
            if lab != label:
                continue
            if not _same(seen[which], want[which], atol):
                return args, want, seen
        return None

    def hint_for(found, fallback):
        args, _, seen = found
        for mistake, hint in MERGE_MISTAKES.items():
            o, lse = merge_by_rule(*args, mistakes={mistake})
            if _same(seen[0], o, LARGE_ATOL) and _same(seen[1], lse, LARGE_ATOL):
                return hint
        if np.isnan(seen[0]).any() or np.isnan(seen[1]).any():
            return "NaN in the result: " + fallback
        return fallback

    parts = []
    spec = [("plain", 0, 2, "the merged output is not the attention over both blocks",
             "the output is the two partial outputs weighted by exp(lse1 - lse) and "
             "exp(lse2 - lse)"),
            ("plain", 1, 1, "the merged lse is not the log-sum-exp over both blocks",
             MERGE_MISTAKES["lse_max"]),
            ("large", None, 1, "large logits (lse near 1000) do not merge right",
             MERGE_MISTAKES["no_max"]),
            ("one_side", None, 1, "a row with no key in one part is not the other part's",
             "a part with lse -inf weighs exp(-inf) = 0: the row is the other part's o "
             "and lse"),
            ("both", None, 1, "a row with no key in either part is not lse -inf, output 0",
             MERGE_MISTAKES["nan_masked"])]
    for label, which, points, what, fallback in spec:
        atol = LARGE_ATOL if label == "large" else ATOL
        found = None
        for w in ((0, 1) if which is None else (which,)):
            found = found or first_wrong(label, w, atol)
        if found is None:
            parts.append((points, True, "", "", "", ""))
            continue
        args, want, seen = found
        parts.append((points, False, what,
                      f"o {_fmt(want[0])}, lse {_fmt(want[1])}",
                      f"o {_fmt(seen[0])}, lse {_fmt(seen[1])}",
                      hint_for(found, fallback)))
    return result(name, 6, parts, "the merge equals attention over both blocks, with large "
                                  "logits and with rows that have no key")


def _fmt(a) -> str:
    a = np.asarray(a, np.float64)
    flat = a.reshape(-1)[:6]
    text = np.array2string(flat, precision=4, suppress_small=True, max_line_width=200)
    return text if a.size <= 6 else text[:-1] + " ...]"


# -- task 2: ring attention ---------------------------------------------------------------
RING_CASES = {
    "even": [dict(seed=21, n=6, sizes=(4, 4, 4, 4)), dict(seed=22, n=2, sizes=(3, 3))],
    "uneven": [dict(seed=23, n=5, sizes=(5, 1, 7, 3)), dict(seed=24, n=4, sizes=(2, 9))],
    # the query block at positions 8..11 of 16 (a whole block in its future), and 3..5 of 12
    "causal": [dict(seed=25, n=4, sizes=(4, 4, 4, 4), causal_at=8),
               dict(seed=26, n=3, sizes=(3, 2, 6, 1), causal_at=3)],
    "no_key": [dict(seed=27, n=5, sizes=(3, 4, 2), dead_rows={0: (1, 4), 1: (1, 4),
                                                            2: (1, 2, 4)})],
    "large": [dict(seed=28, n=4, sizes=(3, 5, 2), scale=20.0)],
}


# A long sequence whose memory is measured (part of "even"): 256 queries against 64 blocks
# of 1,024 keys. Its whole score matrix is 64 MB (float32), one block's 1 MB; q, k and v
# take 3.1 MB. Graded (the kernel's control group, read by the judge, 2026-12-06): honest
# rings took 13 and 21 MB (PyTorch) and 18 MB (Paddle) at their peak; the same rings with
# the whole score matrix computed once beside them 76 MB in either framework.
MEMORY_CASE = dict(seed=29, n=256, sizes=(1024,) * 64)
BLOCKS_OF_ROOM = 8           # the bound: 8 blocks' scores with their partials,
INPUT_COPIES = 4             # 4 copies of the inputs (they arrive during the call),
FIRST_USE = 16 * 2**20       # and a framework's first large operations in a process


def memory_bound(case: dict, d: int = 8, dv: int = 4) -> dict:
    """What a call on ``case`` may add to memory at its peak, and why (bytes, float32):
    ``block``, one block's scores (the largest block) with its partial (o, lse); ``whole``,
    the whole score matrix; ``inputs``, q and every block's k and v; ``ring``, about what a
    ring needs (a block's scores and their exponentials twice over, the inputs and the
    framework's start-up below);
    ``bound``, what is paid: room for 8 blocks' scores (a block's scores, their
    exponentials, the temporaries of a softmax and what an allocator keeps of them), 4
    copies of the inputs (the kernel receives them during the call) and 16 MB for what a
    framework sets up on its first large operations in a process (its threads; 11 to 13 MB
    measured with PyTorch). It is well below the whole score matrix (64 blocks here), so an
    answer that computes that matrix, even once and beside the ring, goes over it."""
    n, sizes = case["n"], case["sizes"]
    block = 4 * n * (max(sizes) + dv + 1)
    inputs = 4 * (n * d + sum(sizes) * (d + dv))
    return {"block": block, "whole": 4 * n * sum(sizes), "inputs": inputs,
            "ring": 4 * block + inputs + FIRST_USE,
            "bound": BLOCKS_OF_ROOM * block + INPUT_COPIES * inputs + FIRST_USE}


def _memory_problem(reading: Reading, case: dict) -> str:
    """'' when the call stayed below the bound (or was not measured), else the hint."""
    if reading.bytes is None:
        return ""
    b = memory_bound(case)
    if reading.bytes < b["bound"]:
        return ""
    mb = lambda x: f"{x / 2**20:.0f} MB"         # noqa: E731
    # one wording for any peak over the bound: a peak near the whole matrix may read a few
    # MB either side of it (what the allocator reuses), and the hint must not depend on that
    held = "held more than one block's scores at a time"
    return (f"your ring_attention {held}: peak {mb(reading.bytes)} ({reading.how}); the whole "
            f"score matrix of {case['n']} queries x {sum(case['sizes'])} keys is "
            f"{mb(b['whole'])}, a ring needs about {mb(b['ring'])} (one block's scores, "
            f"{mb(b['block'])}, a few times over, the inputs and the framework's start-up) "
            f"and is paid below {mb(b['bound'])}: compute "
            "each block's scores, fold its partial in with merge and let them go before the "
            "next block; never q @ (all the keys)")


_WANT: dict = {}


def _want(case: dict):
    """Attention over every key of ``case`` (float64; the long case's computed block by block:
    its whole score matrix would take 128 MB in float64 here)."""
    key = repr(sorted(case.items()))
    if key not in _WANT:
        drawn = _draw(**case)
        large = case["n"] * sum(case["sizes"]) > 2**20
        _WANT[key] = ring_by_rule(*drawn) if large else _full(*drawn)
    return _WANT[key]


def _ring_hint(case: dict, seen, fallback: str) -> str:
    q, ks, vs, masks = _draw(**case)
    for mistake, hint in RING_MISTAKES.items():
        o, lse = ring_by_rule(q, ks, vs, masks, {mistake})
        if _same(seen[0], o, LARGE_ATOL) and _same(seen[1], lse, LARGE_ATOL):
            return hint
    if np.isnan(seen[0]).any() or np.isnan(seen[1]).any():
        return RING_MISTAKES["no_max"] if case.get("scale", 1) > 1 else NAN_NO_KEY
    return fallback


_APART: list = []


def _apart():
    """The check's own thread for the merge's work (one, made once)."""
    if not _APART:
        import concurrent.futures

        from grader.lab.core.threads import framework_ready

        _APART.append(concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="a11-merge", initializer=framework_ready))
    return _APART[0]


def recording_merge(framework: str, calls: list, apart: bool = False):
    """The merge handed to ``ring_attention``: the course's (float64), returned as float32
    tensors of ``framework``; each call's arguments and result are appended to ``calls``.
    ``apart``: its work is done in a thread of its own (see ``_ring_call``)."""
    if apart:
        inner, pool = recording_merge(framework, calls), _apart()
        return lambda *args: pool.submit(inner, *args).result()

    def merge(o1, lse1, o2, lse2):
        args = [to_numpy(a) for a in (o1, lse1, o2, lse2)]
        if any(a.ndim != n for a, n in zip(args, (2, 1, 2, 1))):
            raise ValueError("merge takes o1 (n, dv), lse1 (n,), o2 (n, dv), lse2 (n,)")
        o, lse = merge_by_rule(*args)
        calls.append((args, (o, lse)))
        return to_tensor(framework, o), to_tensor(framework, lse)
    return merge


def _pair_same(a, b) -> bool:
    return _same(a[0], b[0], LARGE_ATOL) and _same(a[1], b[1], LARGE_ATOL)


def _over_block(part, v) -> bool:
    """Whether ``part`` can be a partial result over the block whose values are ``v``: each
    row of its output is a softmax-weighted mean of the block's values, so it lies within
    their range, column by column (a row with no key is 0). Its numbers are the value
    checks' business (a wrong scale or mask is still such a mean; NaN fails there), but the
    attention over all the keys passed as one block's part is not such a mean."""
    o = np.asarray(part[0], np.float64)
    v = np.asarray(v, np.float64)
    if o.ndim != 2 or o.shape[1] != v.shape[1]:
        return False
    if not np.isfinite(o).all():
        return True
    lo, hi = v.min(axis=0) - LARGE_ATOL, v.max(axis=0) + LARGE_ATOL
    inside = ((o >= lo) & (o <= hi)).all(axis=1) | (np.abs(o) <= LARGE_ATOL).all(axis=1)
    return bool(inside.all())


def ring_process(case: dict, calls: list, got) -> str:
    """What is wrong with the merges an answer made on ``case`` ('' when they show the ring:
    see the module docstring). Each merge's part is checked to be a mean of its block's
    values (:func:`_over_block`), not to be right: that is the value checks'."""
    _, ks, vs, _ = _draw(**case)
    blocks = len(ks)
    if len(calls) not in (blocks, blocks - 1):
        return (f"ring_attention called merge {len(calls)} times for {blocks} key blocks: fold "
                "each block's partial result (its o and lse) into what you have with the merge "
                "it is given, one block at a time (concatenating the blocks, or merging "
                "inline, is not the ring)")
    first = blocks - len(calls)          # 1: the first block's partial is the start
    previous = None
    for j, ((o1, l1, o2, l2), out) in enumerate(calls):
        block = first + j
        sides = [((o2, l2), (o1, l1)), ((o1, l1), (o2, l2))]     # (part, running) either way
        ok = False
        for part, running in sides:
            if not _over_block(part, vs[block]):
                continue
            if previous is not None and not _pair_same(running, previous):
                continue
            if previous is None and first and not _over_block(running, vs[0]):
                continue
            if previous is None and not first and np.abs(np.nan_to_num(running[0])).max() > ATOL:
                continue                # "no keys yet": o = 0 (its lse the value checks')
            ok = True
            break
        if not ok:
            return (f"merge call {j + 1} did not fold block {block + 1}'s partial result into the "
                    "previous merge's result: call merge once per block, in the order of the "
                    "blocks, with what the last merge returned and that block's o and lse")
        previous = out
    if previous is not None and not _pair_same(got, previous):
        return ("ring_attention did not return what its last merge returned: the result is "
                "the blocks' partials folded in, nothing computed beside them")
    return ""


def _ring_call(fn: Callable, framework: str, case: dict, measure: bool = False):
    """One graded call on ``case``: ``(o, lse)`` read back, what is wrong with its merges
    ('' for a ring) and what it took in memory (``measure``: by the trusted side,
    :func:`grader.grading.judge.meter.peak_of`; else not measured)."""
    q, ks, vs, masks = _draw(**case)
    args = (to_tensor(framework, q), [to_tensor(framework, k) for k in ks],
            [to_tensor(framework, v) for v in vs],
            None if masks is None else [to_tensor(framework, m) for m in masks])
    calls: list = []
    # measured in this process (self-study, tests: grader.grading.judge.meter), the merge's
    # own work runs in a thread of the check's: its arrays then live in that thread's heap
    # (glibc: an arena per thread), not between the ring's freed blocks, where they made an
    # honest ring's first call read 81 MB instead of 19 (judged, it runs in the judge)
    merge = recording_merge(framework, calls, apart=measure and not in_kernel(fn))
    with (peak_of(fn) if measure else contextlib.nullcontext(Reading())) as reading:
        out = call(fn, *args, merge=merge)
    got = read_pair(out, q.shape[0], vs[0].shape[1])
    return got, ring_process(case, calls, got), reading


def _case_sizes(case: dict) -> str:
    sizes = list(case["sizes"])
    if len(set(sizes)) == 1 and len(sizes) > 8:
        return f"{case['n']} queries, {len(sizes)} key blocks of {sizes[0]}"
    return f"{case['n']} queries, key blocks of {sizes}"


def check_ring_attention(fn: Callable, framework: str = "torch") -> CheckResult:
    """6 points: equal blocks (2: two short sequences, and a long one whose memory per call
    the trusted side measures), uneven blocks (1), a causal mask (1), rows with no key (1),
    large logits (1); each paid only where the merges show the ring (module docstring)."""
    name = "a11: ring_attention folds the blocks in with merge, equal to full attention"
    if (bad := framework_problem(name, 6, framework)) is not None:
        return bad
    seen, process = {}, {}
    try:
        for label, cases in RING_CASES.items():
            for i, case in enumerate(cases):
                seen[(label, i)], process[(label, i)], _ = _ring_call(fn, framework, case)
    except StudentError as e:
        if "keyword argument 'merge'" in str(e):
            return CheckResult(name, 0, 6, str(e), hint="the task's signature is ring_attention("
                               "q, k_blocks, v_blocks, masks=None, merge=merge): fold the blocks "
                               "in with the merge it is given (the grader passes its own)")
        return CheckResult(name, 0, 6, str(e), hint="run the public check above")
    except (TypeError, ValueError) as e:
        return CheckResult(name, 0, 6, "not a pair (o, lse) of the right shapes",
                           seen=str(e), hint="return o, lse: o of shape (n, dv), lse (n,)")
    spec = [("even", 2, "equal blocks without a mask", "scores q k^T / sqrt(d), each "
             "block's softmax-weighted values and lse, merged block after block"),
            ("uneven", 1, "blocks of different sizes", "each block has its own number of "
             "keys: take the sizes from the blocks"),
            ("causal", 1, "a causal mask", RING_MISTAKES["ignore_mask"]),
            ("no_key", 1, "rows with no key at all", "a row with no key has lse -inf and "
             "output 0, with no NaN on the way"),
            ("large", 1, "large logits", RING_MISTAKES["no_max"])]
    parts, unmeasured = [], ""

    def wrong(label, case, got, problem, what, fallback, points):
        """The part's failure on ``case`` (None: the case is right)."""
        atol = LARGE_ATOL if label == "large" else ATOL
        if problem:       # the output is paid only for the ring's process
            return (points, False, f"{what}: the blocks were not folded in with merge one at "
                    f"a time ({_case_sizes(case)})", "one merge per block, each folding that "
                    "block's partial into the previous merge's result", "other merge calls",
                    problem)
        want = _want(case)
        if not (_same(got[0], want[0], atol) and _same(got[1], want[1], atol)):
            return (points, False, f"{what}: not full attention ({_case_sizes(case)})",
                    f"o {_fmt(want[0])}, lse {_fmt(want[1])}",
                    f"o {_fmt(got[0])}, lse {_fmt(got[1])}", _ring_hint(case, got, fallback))
        return None

    for label, points, what, fallback in spec:
        found = None
        for i, case in enumerate(RING_CASES[label]):
            found = wrong(label, case, seen[(label, i)], process[(label, i)], what, fallback,
                          points)
            if found:
                break
        if found is None and label == "even":
            # the long sequence, last: measured only where the short ones were right
            try:
                got, problem, reading = _ring_call(fn, framework, MEMORY_CASE, measure=True)
            except StudentError as e:
                got, problem, reading = None, str(e), Reading()
            except (TypeError, ValueError) as e:
                got, problem, reading = None, f"not a pair (o, lse) of the right shapes: {e}", \
                    Reading()
            if got is None:
                found = (points, False, f"{what}: a long sequence ({_case_sizes(MEMORY_CASE)}) "
                         "failed", "o, lse", problem, "run your ring_attention on 64 blocks "
                         "of 1,024 keys in your notebook")
            else:
                found = wrong(label, MEMORY_CASE, got, problem, what, fallback, points)
            if found is None and (memory := _memory_problem(reading, MEMORY_CASE)):
                b = memory_bound(MEMORY_CASE)
                found = (points, False, f"{what}: a long sequence ({_case_sizes(MEMORY_CASE)}) "
                         "took more memory than a ring needs",
                         f"below {b['bound'] / 2**20:.0f} MB at the peak of the call",
                         f"{reading.bytes / 2**20:.0f} MB", memory)
            if reading.bytes is None:
                unmeasured = f" (memory per call {reading.how})"
        parts.append(found or (points, True, "", "", "", ""))
    return result(name, 6, parts, "blocks folded in with merge one at a time, equal to full "
                                  "attention on equal and uneven blocks, causal and fully "
                                  "masked rows, large logits; a long sequence within a "
                                  "ring's memory" + unmeasured)


def check_all(merge_fn: Callable, ring_fn: Callable, framework: str = "torch"):
    return [check_merge(merge_fn, framework), check_ring_attention(ring_fn, framework)]
