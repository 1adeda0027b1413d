"""Launching the context/expert page's driver as the page does (torchrun or paddle's
launcher, gloo, one thread per rank), through ``_run``: it runs the ring and then the
mixture of experts in one launch; both JSON files and rank 0's printed lines come
back."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ._run import BIN, SCRIPTS, run


def run_driver(script: str, ranks: int, tmp: Path) -> tuple[dict, dict, str]:
    """context_expert_{torch,paddle}.py: the ring's JSON, the MoE's, rank 0's lines."""
    ring, moe = tmp / "ring.json", tmp / "moe.json"
    if script.endswith("_torch.py"):
        cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", str(ranks)]
    else:
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--log_level", "ERROR",
               "--nproc_per_node", str(ranks), "--log_dir", str(tmp / "log")]
    done = run(cmd + [str(SCRIPTS / script), "--ring-out", str(ring), "--moe-out",
                      str(moe)], cwd=SCRIPTS, timeout=400, PYTHONWARNINGS="ignore")
    log = done.stdout if script.endswith("_torch.py") else \
        (tmp / "log" / "workerlog.0").read_text()
    return json.loads(ring.read_text()), json.loads(moe.read_text()), log
