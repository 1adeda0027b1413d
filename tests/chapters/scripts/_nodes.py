"""Several "nodes" on this machine, for the tests of the capstone's multi-node launch and
of its batch scripts' failure paths: each node one launcher in a session of its own, its
output in a file (read while it runs), ended with every process it started when a test
makes it "die"; and a stand-in ``srun`` whose other nodes never start.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ._run import env

# srun as on a cluster where only the first node's task ever starts (its node failed to
# boot, its image is still being pulled): srun's own options are dropped, the command
# runs once, as node 0 of $SLURM_NNODES
SRUN_ONE_NODE = """#!/bin/bash
while [[ $1 == -* ]]; do shift; done
SLURM_NODEID=0 SLURM_PROCID=0 SLURM_LOCALID=0 exec "$@"
"""
SCONTROL = """#!/bin/bash
# scontrol show hostnames LIST: this machine, once per node
for i in $(seq 1 "$SLURM_NNODES"); do echo 127.0.0.1; done
"""


def one_node_srun(tmp: Path) -> Path:
    """A folder to put first on PATH: ``srun`` that starts node 0 alone, ``scontrol``
    that names this machine for every node."""
    fake = tmp / "srun-one-node"
    fake.mkdir()
    for name, text in (("srun", SRUN_ONE_NODE), ("scontrol", SCONTROL)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    return fake


@dataclass
class Node:
    """One launcher standing for one machine."""
    name: str
    proc: subprocess.Popen
    log: Path
    started: float = field(default_factory=time.monotonic)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def descendants(self) -> list[int]:
        """Every process this node started, at any depth (a launcher's ranks may be in
        sessions of their own, out of its process group)."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue
            pid, ppid = int(stat.parent.name), int(text.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(pid)
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(children.get(pid, []))
        return out

    def die(self) -> None:
        """The machine goes away: every process of this node killed at once."""
        for pid in self.descendants():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def wait(self, timeout: float) -> float:
        """Seconds from this node's start to its end; an AssertionError (and every
        process of it killed) if it is still running after ``timeout`` seconds."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.die()
            raise AssertionError(f"{self.name} still ran after {timeout:.0f} s: a hang\n"
                                 f"{self.output()[-3000:]}") from None
        return time.monotonic() - self.started


def start_node(name: str, cmd: list[str], cwd: Path, tmp: Path, **extra: str) -> Node:
    log = tmp / f"{name}.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env(**extra), stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return Node(name, proc, log)


def wait_for(nodes: list[Node], text: str, timeout: float) -> Node:
    """The first node whose output shows ``text``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for node in nodes:
            if text in node.output():
                return node
        if all(n.proc.poll() is not None for n in nodes):
            break
        time.sleep(0.2)
    for node in nodes:
        node.die()
    raise AssertionError(f"no node printed {text!r} within {timeout:.0f} s:\n" + "\n".join(
        f"--- {n.name}:\n{n.output()[-2000:]}" for n in nodes))


def stop_all(nodes: list[Node]) -> None:
    for node in nodes:
        if node.proc.poll() is None or node.descendants()[1:]:
            node.die()


def record_if_stale(path: Path, result: dict, script: Path, command: str) -> None:
    """Write the record the page shows (grader.lab.capstone.records) when it is missing
    or of another version of ``script``, so that the page never shows a run of another
    script as current."""
    from grader.lab.capstone.records import read_record, write_record

    record = read_record(path, script)
    if record is None or record["stale"]:
        write_record(result, script, command, path)
    assert not read_record(path, script)["stale"]


def same_losses_as_one_node(nodes: list[Node], out: Path, one_node: dict, layout: str,
                            record: Path, script: Path, command: str) -> None:
    """The two-node run's ending, either framework: both nodes exit 0, the run trained, its
    losses are the one-node run's (the same floats, not close ones), and the record the
    page shows is rewritten when the script changed."""
    import json

    from grader.lab import capstone

    try:
        for node in nodes:
            node.wait(timeout=300)
            assert node.proc.returncode == 0, node.output()[-4000:]
    finally:
        stop_all(nodes)
    two = json.loads(out.read_text())
    assert two["world"] == one_node["world"] == 2
    ((a,), (b,)) = two["runs"], one_node["runs"]
    assert a["losses"] == b["losses"]                   # the same floats, not close ones
    assert two["reference"][0] - two["reference"][-1] > 100 * capstone.TOLERANCE  # trained
    record_if_stale(record, {"layout": layout, "one_node": b["losses"],
                             "two_nodes": a["losses"]}, script, command)
