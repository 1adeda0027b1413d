"""Launches several test modules share: each costs seconds of starting processes."""
from __future__ import annotations

import json

import pytest

from ._run import BIN, SCRIPTS, run


@pytest.fixture(scope="session")
def zero2_then_pipeline(tmp_path_factory) -> dict:
    """One 2-rank torchrun, as the sharding page starts it: ZeRO's strategies, then (its
    ``--pipeline``) the pipeline script in the same launch. ``stdout``, and each
    script's JSON results (``zero``, ``pipe``)."""
    out = tmp_path_factory.mktemp("zero2")
    p = run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2",
             str(SCRIPTS / "zero_torch.py"), "--out", "zero.json", "--pipeline",
             "pipe.json"], out, timeout=600)
    return {"stdout": p.stdout, "zero": json.loads((out / "zero.json").read_text()),
            "pipe": json.loads((out / "pipe.json").read_text())}
