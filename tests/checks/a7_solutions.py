"""Submissions for assignment 7, written as a student would in the notebook (``dist`` is
``torch.distributed``; the notebook's preamble imports it)."""
import numpy as np
import torch
import torch.distributed as dist


def reference(x, rank, world_size):
    """Chunks from np.array_split's bounds; even ranks send first, odd ranks receive first."""
    p = world_size
    bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.arange(x.shape[0]), p)])
    chunk = lambda i: slice(int(bounds[i % p]), int(bounds[i % p + 1]))  # noqa: E731
    right, left = (rank + 1) % p, (rank - 1) % p

    def exchange(send_i, recv_i):
        out, buf = x[chunk(send_i)].clone(), torch.zeros_like(x[chunk(recv_i)])
        if rank % 2 == 0:
            dist.send(out, right)
            dist.recv(buf, left)
        else:
            dist.recv(buf, left)
            dist.send(out, right)
        return buf

    for s in range(p - 1):                         # reduce-scatter
        buf = exchange(rank - s, rank - s - 1)
        x[chunk(rank - s - 1)] += buf
    for s in range(p - 1):                         # all-gather: pass finished chunks on
        buf = exchange(rank - s + 1, rank - s)
        x[chunk(rank - s)] = buf
    return x


def isend_views(x, rank, world_size):
    """isend/recv into views of torch.tensor_split chunks; returns a new tensor."""
    p = world_size
    parts = [c.clone() for c in torch.tensor_split(x, p)]
    nxt, prv = (rank + 1) % p, (rank - 1) % p
    for s in range(p - 1):
        i_send, i_recv = (rank - s) % p, (rank - s - 1) % p
        req = dist.isend(parts[i_send], nxt)
        buf = torch.empty_like(parts[i_recv])
        dist.recv(buf, prv)
        req.wait()
        parts[i_recv] += buf
    for s in range(p - 1):
        i_send, i_recv = (rank - s + 1) % p, (rank - s) % p
        req = dist.isend(parts[i_send], nxt)
        buf = torch.empty_like(parts[i_recv])
        dist.recv(buf, prv)
        req.wait()
        parts[i_recv] = buf
    return torch.cat(parts)


def reverse_ring(x, rank, world_size):
    """The ring the other way round, torch.chunk's sizes (4, 4, 2), results left in x."""
    p = world_size
    chunks = list(torch.chunk(x, p))
    sizes = [len(c) for c in chunks] + [0] * (p - len(chunks))
    starts = np.cumsum([0] + sizes)
    view = lambda i: x[int(starts[i % p]):int(starts[i % p + 1])]  # noqa: E731
    to, frm = (rank - 1) % p, (rank + 1) % p
    for phase in ("reduce", "gather"):
        for s in range(p - 1):
            i_send = (rank + s + (0 if phase == "reduce" else -1)) % p
            i_recv = (i_send + 1) % p
            buf = torch.zeros(sizes[i_recv])
            ops = [lambda: dist.send(view(i_send).clone(), to), lambda: dist.recv(buf, frm)]
            for op in (ops if rank % 2 else ops[::-1]):
                op()
            if phase == "reduce":
                view(i_recv).add_(buf)
            else:
                view(i_recv).copy_(buf)
    return None


# ---- typical wrong answers -------------------------------------------------------------


def deadlock(x, rank, world_size):
    """Every rank sends first with a blocking send: nobody is receiving."""
    p = world_size
    parts = list(torch.tensor_split(x.clone(), p))
    for s in range(p - 1):
        i_send, i_recv = (rank - s) % p, (rank - s - 1) % p
        dist.send(parts[i_send], (rank + 1) % p)
        buf = torch.zeros_like(parts[i_recv])
        dist.recv(buf, (rank - 1) % p)
        parts[i_recv] += buf
    return torch.cat(parts)


def wrong_chunk_index(x, rank, world_size):
    """Sends chunk (r + s) instead of (r - s): partial sums meet the wrong chunks."""
    p = world_size
    parts = [c.clone() for c in torch.tensor_split(x, p)]
    for phase in ("rs", "ag"):
        for s in range(p - 1):
            i_send = (rank + s) % p if phase == "rs" else (rank + s + 1) % p
            i_recv = (rank + s - 1) % p if phase == "rs" else (rank + s) % p
            req = dist.isend(parts[i_send], (rank + 1) % p)
            buf = torch.empty_like(parts[i_recv])
            dist.recv(buf, (rank - 1) % p)
            req.wait()
            parts[i_recv] = parts[i_recv] + buf if phase == "rs" else buf
    return torch.cat(parts)


def no_all_gather(x, rank, world_size):
    """Stops after the reduce-scatter: each rank holds one finished chunk."""
    p = world_size
    parts = [c.clone() for c in torch.tensor_split(x, p)]
    for s in range(p - 1):
        i_send, i_recv = (rank - s) % p, (rank - s - 1) % p
        req = dist.isend(parts[i_send], (rank + 1) % p)
        buf = torch.empty_like(parts[i_recv])
        dist.recv(buf, (rank - 1) % p)
        req.wait()
        parts[i_recv] += buf
    return torch.cat(parts)


def send_everything(x, rank, world_size):
    """Correct sums, but every rank sends its whole tensor to every other rank."""
    total = x.clone()
    reqs = [dist.isend(x, r) for r in range(world_size) if r != rank]
    for r in range(world_size):
        if r != rank:
            buf = torch.empty_like(x)
            dist.recv(buf, r)
            total += buf
    for q in reqs:
        q.wait()
    return total


def calls_all_reduce(x, rank, world_size):
    dist.all_reduce(x)
    return x


def all_gather_off_by_one(x, rank, world_size):
    """A right reduce-scatter, then an all-gather that passes chunks "the same way": with the
    reduce-scatter's indices, so unfinished chunks travel and overwrite finished ones."""
    p = world_size
    parts = [c.clone() for c in torch.tensor_split(x, p)]
    for phase in ("rs", "ag"):
        for s in range(p - 1):
            i_send, i_recv = (rank - s) % p, (rank - s - 1) % p
            req = dist.isend(parts[i_send], (rank + 1) % p)
            buf = torch.empty_like(parts[i_recv])
            dist.recv(buf, (rank - 1) % p)
            req.wait()
            parts[i_recv] = parts[i_recv] + buf if phase == "rs" else buf
    return torch.cat(parts)
