"""Starting the chapter's scripts the way a reader does, for the tests: the environment's
own ``torchrun`` / ``python -m paddle.distributed.launch``, one free port each, output
kept for the failure message."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

# a free port outside the kernel's ephemeral range: one found by binding port 0 can be handed
# to another test's connection before the launcher binds it, and a torchrun that then joins
# the stranger's listener as a client hangs (grader.lab.core.ports)
from grader.lab.core.ports import free_port  # noqa: F401  (the chapter-script tests' import)

SCRIPTS = Path(__file__).resolve().parents[3] / "chapters" / "scripts"
BIN = Path(sys.executable).parent


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
        logs: tuple[Path, ...] = (), **extra: str) -> subprocess.CompletedProcess:
    """Run ``cmd`` to its end. A run past ``timeout`` is stopped with every process it
    started (its own session: a launcher's ranks are not left running for the rest of the
    suite) and fails with what it printed and the end of each of ``logs``."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env(**extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{' '.join(cmd)} did not end within {timeout:.0f} s:\n"
                             f"{out[-3000:]}\n{err[-3000:]}{_tails(logs)}") from None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)     # what it left behind, if anything
        except ProcessLookupError:
            pass
    p = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if check and p.returncode:
        raise AssertionError(f"{' '.join(cmd)} exited with {p.returncode}:\n"
                             f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}{_tails(logs)}")
    return p


def _tails(logs: tuple[Path, ...]) -> str:
    out = ""
    for log in logs:
        try:
            out += f"\n--- {log.name}:\n{log.read_text(errors='replace')[-3000:]}"
        except OSError:
            out += f"\n--- {log.name}: not written"
    return out


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


def attempts(log: str) -> list[list[tuple[int, float]]]:
    """The run's loss log (one "step loss" line per step, kept across restarts), cut
    where a restarted attempt goes back to an earlier step."""
    out: list[list[tuple[int, float]]] = []
    for line in log.split("\n"):
        if line.strip():
            step, loss = line.split()
            if not out or int(step) != out[-1][-1][0] + 1:
                out.append([])
            out[-1].append((int(step), float(loss)))
    return out
