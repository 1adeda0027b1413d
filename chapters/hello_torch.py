"""Two ranks, one all-reduce:
`torchrun --standalone --nproc_per_node 2 hello_torch.py`."""
import os

import torch
import torch.distributed as dist

# torchrun starts one process per rank and tells each one who it is (environment).
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])

# One GPU per rank: NCCL. Fewer GPUs than ranks (or none): gloo, on the CPU.
if torch.cuda.device_count() >= local_world:
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    backend = "nccl"
else:
    device = torch.device("cpu")
    backend = "gloo"

dist.init_process_group(backend)  # reads MASTER_ADDR, RANK, WORLD_SIZE set by torchrun
rank, world = dist.get_rank(), dist.get_world_size()

x = torch.full((4,), float(rank + 1), device=device)  # rank r contributes r + 1
dist.all_reduce(x, op=dist.ReduceOp.SUM)  # every rank now holds 1 + 2 + ... + world
# one write per line (the newline included): the ranks share one output, and a print's text
# and its newline, written apart, could let the other rank's line in between
print(f"rank {rank} of {world} on {device} ({backend}): {x.tolist()}\n", end="", flush=True)

dist.destroy_process_group()
