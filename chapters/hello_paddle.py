"""Two ranks, one all-reduce:
`python -m paddle.distributed.launch --nproc_per_node 2 hello_paddle.py`."""
import paddle
import paddle.distributed as dist

# The launcher starts one process per rank, gives each its device (a GPU build: one GPU
# per rank; a CPU build: the CPU) and its rank in environment variables.
dist.init_parallel_env()  # NCCL between GPUs, gloo on a CPU build
rank, world = dist.get_rank(), dist.get_world_size()

x = paddle.full([4], float(rank + 1), dtype="float32")  # rank r contributes r + 1
dist.all_reduce(x, op=dist.ReduceOp.SUM)  # every rank now holds 1 + 2 + ... + world
device = paddle.device.get_device()
print(f"rank {rank} of {world} on {device}: {x.tolist()}", flush=True)
