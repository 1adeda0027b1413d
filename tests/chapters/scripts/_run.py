"""Starting the chapter's scripts the way a reader does, for the tests: the environment's
own ``torchrun`` / ``python -m paddle.distributed.launch``, one free port each, output
kept for the failure message."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from grader.lab.core.ports import free_ports

SCRIPTS = Path(__file__).resolve().parents[3] / "chapters" / "scripts"
BIN = Path(sys.executable).parent


def free_port() -> int:
    """A free port outside the kernel's ephemeral range (grader.lab.core.ports: one found
    by binding port 0 can be handed to another test's connection before the launcher
    binds it, and a torchrun that then joins the stranger's listener as a client hangs)."""
    return free_ports(1)[0]


def env(**extra: str) -> dict[str, str]:
    """This environment with the venv's commands first on PATH, as the book build does,
    and none of a launcher's variables leaking in from outside (but the suite's own
    ``PET_LOG_DIR``, where torchrun keeps its logs: tests/conftest.py's torchrun_logs)."""
    out = {k: v for k, v in os.environ.items()
           if (not k.startswith(("PADDLE_", "PET_", "TORCHELASTIC_")) or k == "PET_LOG_DIR")
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    out["PATH"] = os.pathsep.join([str(BIN), out.get("PATH", "")])
    out.setdefault("OMP_NUM_THREADS", "1")
    out.setdefault("GLOG_minloglevel", "2")
    out.update(extra)
    return out


def run(cmd: list[str], cwd: Path, timeout: float = 300, check: bool = True,
        **extra: str) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=cwd, env=env(**extra), capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode:
        raise AssertionError(f"{' '.join(cmd)} exited with {p.returncode}:\n"
                             f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def start(cmd: list[str], cwd: Path, **extra: str) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=cwd, env=env(**extra), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(procs: list[subprocess.Popen], timeout: float = 300) -> list[str]:
    """Wait for processes started together; kill the rest if one fails or hangs."""
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outs.append(out)
            if p.returncode:
                raise AssertionError(f"{p.args} exited with {p.returncode}:\n{out[-4000:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


FAKE_SRUN = """#!/bin/bash
# srun with one task per node, every "node" on this machine; each task's output goes
# to $LOGDIR/node<i>.log
pids=()
for i in $(seq 0 $((SLURM_NNODES - 1))); do
  SLURM_NODEID=$i SLURM_PROCID=$i "$@" > "$LOGDIR/node$i.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
"""
FAKE_SCONTROL = """#!/bin/bash
# scontrol show hostnames LIST: one line per node, all of them this machine
for i in $(seq 1 "$SLURM_NNODES"); do echo 127.0.0.1; done
"""


def fake_slurm(tmp_path: Path) -> Path:
    """A folder holding stand-ins for Slurm's ``srun`` and ``scontrol``, to put first on
    PATH: a batch script then runs its per-node command once per "node" on this machine."""
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    return fake
