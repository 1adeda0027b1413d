"""The fitting chapter's FSDP2 script, launched as the page launches it (torchrun, 2 gloo
ranks): the shards stay FP32, the computation saves BF16, and it trains."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

CHAPTERS = Path(__file__).resolve().parents[3] / "chapters"


@pytest.mark.slow
def test_fsdp2_with_mixed_precision_and_recomputation_runs_on_gloo_ranks():
    text = (CHAPTERS / "fitting.md").read_text()
    cmd = next(l[1:] for l in text.splitlines()
               if l.startswith("!torchrun") and "fsdp_fit_torch.py" in l)
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                     os.environ.get("PATH", "")]))
    out = subprocess.run(cmd, shell=True, cwd=CHAPTERS, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "DTensor shards of torch.float32" in out.stdout
    assert "dtypes ['torch.bfloat16', 'torch.int64']" in out.stdout
    losses = [float(v) for v in re.findall(r"step \d: loss ([\d.]+)", out.stdout)]
    assert len(losses) == 3 and losses[-1] < losses[0]
