"""This chapter's two experiments in one launch: ring attention
(ring_attention_torch.py), then the mixture of experts (moe_torch.py), one after the
other on the same ranks and the same process group. Each script runs alone as well;
started together, each rank imports PyTorch and joins the group once instead of twice.

    torchrun --standalone --nproc_per_node 4 context_expert_torch.py \\
        --ring-out ring.json --moe-out moe.json
"""
import argparse

import torch.distributed as dist

import moe_torch
import ring_attention_torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ring-out", default=None, help="JSON file of the ring's runs")
    parser.add_argument("--moe-out", default=None, help="JSON file of the MoE's runs")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    dist.init_process_group("gloo" if args.device == "cpu" else "nccl")
    if dist.get_rank() == 0:
        print("ring attention (ring_attention_torch.py):")
    ring_attention_torch.experiment(args.device, args.ring_out)
    if dist.get_rank() == 0:
        print("mixture of experts (moe_torch.py):")
    moe_torch.experiment(args.device, args.moe_out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
