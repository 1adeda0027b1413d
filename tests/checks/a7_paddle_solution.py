"""Assignment 7's reference answer in Paddle (``paddle.distributed`` send / recv over gloo)."""
import numpy as np
import paddle
import paddle.distributed as dist


def reference_paddle(x, rank, world_size):
    p = world_size
    sizes = [len(c) for c in np.array_split(np.arange(x.shape[0]), p)]
    parts = list(paddle.split(x.clone(), sizes))
    right, left = (rank + 1) % p, (rank - 1) % p

    def exchange(i_send, i_recv):
        buf = paddle.zeros_like(parts[i_recv])
        if rank % 2 == 0:
            dist.send(parts[i_send], right)
            dist.recv(buf, left)
        else:
            dist.recv(buf, left)
            dist.send(parts[i_send], right)
        return buf

    for s in range(p - 1):
        i = (rank - s - 1) % p
        parts[i] = parts[i] + exchange((rank - s) % p, i)
    for s in range(p - 1):
        i = (rank - s) % p
        parts[i] = exchange((rank - s + 1) % p, i)
    return paddle.concat(parts)
