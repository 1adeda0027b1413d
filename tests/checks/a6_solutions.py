"""Submissions for assignment 6: the reference, two other correct ones and typical wrong ones."""
import copy
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# ---- reference (PyTorch) -----------------------------------------------------------------


def scatter(batch, n):
    import torch

    return list(torch.chunk(batch, n, dim=0))


def replicate(params, n):
    return [{k: v.detach().clone() for k, v in params.items()} for _ in range(n)]


def parallel_apply(fn, replicas, inputs):
    results = [None] * len(replicas)

    def work(i):
        results[i] = fn(replicas[i], *inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(replicas))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def gather(outputs):
    import torch

    return torch.cat(list(outputs), dim=0)


def reduce_gradients(grads, counts):
    total = sum(counts)
    return {k: sum(g[k] * (c / total) for g, c in zip(grads, counts)) for k in grads[0]}


REFERENCE = dict(scatter=scatter, replicate=replicate, parallel_apply=parallel_apply,
                 gather=gather, reduce_gradients=reduce_gradients)

# ---- another correct one: sizes by hand, a thread pool, sum then divide ------------------


def scatter_by_hand(batch, n):
    rows = batch.shape[0]
    size = (rows + n - 1) // n
    chunks, start = [], 0
    while start < rows:
        chunks.append(batch[start:start + size])
        start += size
    return chunks


def replicate_deepcopy(params, n):
    return [copy.deepcopy(params) for _ in range(n)]


def parallel_apply_pool(fn, replicas, inputs):
    with ThreadPoolExecutor(max_workers=len(replicas)) as pool:
        return list(pool.map(lambda pair: fn(pair[0], *pair[1]), zip(replicas, inputs)))


def gather_concat(outputs):
    import torch

    return torch.concat(outputs)


def reduce_sum_then_divide(grads, counts):
    out = {}
    for k in grads[0]:
        acc = grads[0][k] * counts[0]
        for g, c in zip(grads[1:], counts[1:]):
            acc = acc + g[k] * c
        out[k] = acc / sum(counts)
    return out


BY_HAND = dict(scatter=scatter_by_hand, replicate=replicate_deepcopy,
               parallel_apply=parallel_apply_pool, gather=gather_concat,
               reduce_gradients=reduce_sum_then_divide)

# ---- a third correct one: torch.split by the chunk size, futures, a stacked weighted sum --


def scatter_split(batch, n):
    import math

    import torch

    return list(torch.split(batch, math.ceil(batch.shape[0] / n)))


def replicate_clone_each(params, n):
    out = []
    for _ in range(n):
        rep = {}
        for name, tensor in params.items():
            rep[name] = tensor.clone()
        out.append(rep)
    return out


def parallel_apply_futures(fn, replicas, inputs):
    pool = ThreadPoolExecutor(max_workers=8)
    futures = [pool.submit(fn, r, *args) for r, args in zip(replicas, inputs)]
    try:
        return [f.result() for f in futures]
    finally:
        pool.shutdown()


def reduce_stacked(grads, counts):
    import torch

    w = torch.tensor(counts, dtype=torch.float32) / sum(counts)
    return {k: torch.einsum("i,i...->...", w, torch.stack([g[k] for g in grads])) for k in grads[0]}


STACKED = dict(scatter=scatter_split, replicate=replicate_clone_each,
               parallel_apply=parallel_apply_futures, gather=gather,
               reduce_gradients=reduce_stacked)

# ---- the reference in Paddle ---------------------------------------------------------------


def gather_paddle(outputs):
    import paddle

    return paddle.concat(list(outputs), axis=0)


def replicate_paddle(params, n):
    return [{k: v.detach().clone() for k, v in params.items()} for _ in range(n)]


PADDLE = dict(scatter=scatter_by_hand, replicate=replicate_paddle, parallel_apply=parallel_apply,
              gather=gather_paddle, reduce_gradients=reduce_gradients)

# ---- another correct one in Paddle: paddle.split by sizes, copies, a pool, stacked sum ----


def scatter_paddle_split(batch, n):
    import paddle

    rows = batch.shape[0]
    size = -(-rows // n)
    sizes = [size] * (rows // size) + ([rows % size] if rows % size else [])
    return paddle.split(batch, sizes, axis=0)


def replicate_paddle_copies(params, n):
    import paddle

    return [{k: paddle.assign(v) for k, v in params.items()} for _ in range(n)]


def gather_paddle_concat(outputs):
    import paddle

    return paddle.concat(outputs)


def reduce_paddle_stacked(grads, counts):
    import paddle

    w = paddle.to_tensor([c / sum(counts) for c in counts], dtype="float32")
    out = {}
    for k in grads[0]:
        stacked = paddle.stack([g[k] for g in grads])
        out[k] = (stacked * w.reshape([-1] + [1] * (stacked.ndim - 1))).sum(axis=0)
    return out


PADDLE_SPLIT = dict(scatter=scatter_paddle_split, replicate=replicate_paddle_copies,
                    parallel_apply=parallel_apply_pool, gather=gather_paddle_concat,
                    reduce_gradients=reduce_paddle_stacked)

# ---- typical wrong answers -----------------------------------------------------------------


def scatter_array_split(batch, n):
    """NumPy's array_split sizes (torch.tensor_split): 4, 3, 3 for 10 rows on 3 devices."""
    rows = batch.shape[0]
    q, r = divmod(rows, n)
    chunks, start = [], 0
    for i in range(min(n, rows)):
        size = q + (1 if i < r else 0)
        chunks.append(batch[start:start + size])
        start += size
    return chunks


def scatter_tensor_split(batch, n):
    import torch

    return list(torch.tensor_split(batch, n))     # empty chunks when rows < n


def scatter_paddle_chunk(batch, n):
    import paddle

    return paddle.chunk(batch, n)       # raises unless rows divide evenly


def reduce_paddle_plain_mean(grads, counts):
    return {k: sum(g[k] for g in grads) / len(grads) for k in grads[0]}


def scatter_drops(batch, n):
    size = batch.shape[0] // n
    return [batch[i * size:(i + 1) * size] for i in range(n)]


def replicate_shared(params, n):
    return [params] * n


def replicate_same_tensors(params, n):
    return [dict(params) for _ in range(n)]


def parallel_apply_sequential(fn, replicas, inputs):
    return [fn(r, *args) for r, args in zip(replicas, inputs)]


def parallel_apply_reversed(fn, replicas, inputs):
    return [fn(r, *args) for r, args in zip(replicas, reversed(inputs))]


def gather_reversed(outputs):
    import torch

    return torch.cat(list(reversed(outputs)))


def reduce_summed(grads, counts):
    return {k: sum(g[k] for g in grads) for k in grads[0]}


def reduce_plain_mean(grads, counts):
    return {k: sum(g[k] for g in grads) / len(grads) for k in grads[0]}


def reduce_twice(grads, counts):
    total = sum(counts)
    return {k: sum(g[k] * (c / total) for g, c in zip(grads, counts)) / len(grads) for k in grads[0]}


def with_(**changes):
    return {**REFERENCE, **changes}


def paddle_with(**changes):
    return {**PADDLE, **changes}
