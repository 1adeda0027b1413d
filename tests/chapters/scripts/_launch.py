"""Launching a chapter script of the context/expert page as the page does (torchrun or
paddle's launcher, gloo, one thread per rank), through ``_run``; the JSON it wrote and
rank 0's printed lines come back."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ._run import BIN, SCRIPTS, run


def run_script(script: str, ranks: int, tmp: Path) -> tuple[dict, str]:
    out = tmp / "run.json"
    if script.endswith("_torch.py"):
        cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", str(ranks)]
    else:
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--log_level", "ERROR",
               "--nproc_per_node", str(ranks), "--log_dir", str(tmp / "log")]
    done = run(cmd + [str(SCRIPTS / script), "--out", str(out)], cwd=SCRIPTS,
               timeout=400, PYTHONWARNINGS="ignore")
    log = done.stdout if script.endswith("_torch.py") else \
        (tmp / "log" / "workerlog.0").read_text()
    return json.loads(out.read_text()), log
