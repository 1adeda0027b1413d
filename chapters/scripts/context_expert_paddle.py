"""This chapter's two experiments in one launch: ring attention
(ring_attention_paddle.py), then the mixture of experts (moe_paddle.py), one after the
other on the same ranks. Each script runs alone as well; started together, each rank
imports Paddle and starts its parallel environment once instead of twice.

    python -m paddle.distributed.launch --nproc_per_node 4 context_expert_paddle.py \\
        --ring-out ring.json --moe-out moe.json
"""
import argparse

import paddle
import paddle.distributed as dist

import moe_paddle
import ring_attention_paddle


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ring-out", default=None, help="JSON file of the ring's runs")
    parser.add_argument("--moe-out", default=None, help="JSON file of the MoE's runs")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    paddle.set_device(args.device)
    dist.init_parallel_env()
    if dist.get_rank() == 0:
        print("ring attention (ring_attention_paddle.py):")
    ring_attention_paddle.experiment(args.device, args.ring_out)
    if dist.get_rank() == 0:
        print("mixture of experts (moe_paddle.py):")
    moe_paddle.experiment(args.device, args.moe_out)


if __name__ == "__main__":
    main()
