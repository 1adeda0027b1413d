"""A real one-node Slurm for the tests that submit the chapters' batch scripts.

Debian's ``slurmctld``, ``slurmd`` and ``munged`` (packages slurmctld, slurmd,
slurm-client, munge; ``make test`` installs them as root: the Makefile's ``slurm-deps``)
started with a private configuration in a folder of their own: their own munge key and
socket, ports, state, spool and logs, and ``SLURM_CONF`` naming that configuration for
every Slurm command the test runs, so nothing of a Slurm the machine may have is used or
changed. The node is this machine under its own host name at 127.0.0.1, with its cores,
and two GPUs of the generic-resource kind (``gres/gpu``: files Slurm counts, no device
behind them), so a script's ``--gpus-per-node`` is allocated and ``SLURM_GPUS_ON_NODE`` set
by Slurm itself. Processes are tracked without control groups (``proctrack/linuxproc``,
``task/none``). slurmd runs jobs as their submitter and needs root: elsewhere the tests skip,
saying so.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.lab.core.ports import free_ports

from ._run import env

TOOLS = ("slurmctld", "slurmd", "sbatch", "scontrol", "munged")
GPUS = 2  # the node's generic GPUs
# reasons a pending job gives when it can never start on this one-node Slurm
NEVER = {"PartitionConfig": "it asks more nodes, cores or GPUs than the node has: override "
                            "the script's counts on sbatch's command line"}

CONF = """\
ClusterName=course
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} Gres=gpu:{gpus} State=UNKNOWN
PartitionName=course Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def missing() -> str:
    """Why a real Slurm cannot run here ("" when it can)."""
    if os.geteuid() != 0:
        return ("a real Slurm needs root here (slurmd starts jobs as their submitter): run "
                "the tests as root, or rely on the stand-in tests of the same scripts")
    lacking = [t for t in TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    if lacking:
        return (f"{', '.join(lacking)} not installed: run 'sudo apt-get install "
                "--no-install-recommends slurmctld slurmd slurm-client munge' (make test "
                "does, as root)")
    return ""


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class Job:
    id: str
    state: str          # Slurm's JobState: COMPLETED, FAILED, TIMEOUT, ...
    exit_code: str      # Slurm's ExitCode, "<status>:<signal>"
    output: str         # the job's standard output and error (one file)


class Slurm:
    """A one-node Slurm started in ``root`` (a short path: munge's socket lives there)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.host = socket.gethostname().split(".")[0]
        self.env = {"SLURM_CONF": str(self.root / "slurm.conf")}

    def start(self, wait: float = 60) -> "Slurm":
        r = self.root
        for sub in ("state", "spool", "dev"):
            (r / sub).mkdir()
        for i in range(GPUS):
            (r / "dev" / f"gpu{i}").touch()
        key = r / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run([_tool("munged"), "--force", f"--socket={r}/munge.sock",
                        f"--key-file={key}", f"--pid-file={r}/munged.pid",
                        f"--log-file={r}/munged.log", f"--seed-file={r}/munged.seed"],
                       check=True, capture_output=True, timeout=30)
        ctld, d = free_ports(2)
        mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
        (r / "slurm.conf").write_text(CONF.format(
            host=self.host, root=r, ctld_port=ctld, d_port=d, cpus=os.cpu_count(),
            mem_mb=mem_mb, gpus=GPUS))
        (r / "gres.conf").write_text(
            f"NodeName={self.host} Name=gpu File={r}/dev/gpu[0-{GPUS - 1}]\n")
        conf = str(r / "slurm.conf")
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([_tool(daemon), "-f", conf], check=True, capture_output=True,
                           timeout=30, env=self._env())
        deadline = time.monotonic() + wait
        state = ""
        while time.monotonic() < deadline:
            state = self._run(["sinfo", "--noheader", "--format=%T"]).stdout.strip()
            if state == "idle":
                return self
            time.sleep(0.5)
        raise RuntimeError(f"the test Slurm's node is {state or 'not reported'} after "
                           f"{wait:.0f} s:\n{self.logs()}")

    def _env(self, **extra: str) -> dict[str, str]:
        return env(**self.env, **extra)

    def _run(self, cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=self._env())

    def logs(self) -> str:
        out = ""
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = self.root / name
            if path.is_file():
                out += f"--- {name}:\n{path.read_text(errors='replace')[-2000:]}\n"
        return out

    def sbatch(self, script: Path, cwd: Path, options: list[str], timeout: float = 300,
               **extra: str) -> Job:
        """Submit ``script`` from ``cwd`` with ``options`` on the command line (they override
        the script's ``#SBATCH`` lines) and the suite's environment plus ``extra``; wait for
        the job to end and read its state, exit code and output back from Slurm.

        The job's state is polled twice a second (``sbatch --wait`` polls ever more slowly
        and returned ~30 s after a job of 10 s had ended); a job still pending after
        ``pending`` seconds for a reason that will not pass (it asks more than the node
        has) fails at once, with the reason."""
        out = self.root / "job-%j.out"
        done = subprocess.run([_tool("sbatch"), "--parsable", f"--output={out}",
                               f"--chdir={cwd}", f"--time={max(1, int(timeout // 60))}",
                               *options, str(script)], cwd=cwd, capture_output=True,
                              text=True, timeout=60, env=self._env(**extra))
        m = re.search(r"^(\d+)", done.stdout.strip(), re.M)
        if not m:
            raise AssertionError(f"sbatch did not submit {script.name} (exit {done.returncode}):"
                                 f"\n{done.stdout}{done.stderr}\n{self.logs()}")
        job = m.group(1)
        fields = self.wait(job, timeout + 30)
        path = self.root / f"job-{job}.out"
        return Job(job, fields.get("JobState", "UNKNOWN"), fields.get("ExitCode", ""),
                   path.read_text(errors="replace") if path.is_file() else "")

    def wait(self, job: str, timeout: float) -> dict[str, str]:
        """``scontrol show job``'s fields once the job has ended."""
        end = time.monotonic() + timeout
        fields: dict[str, str] = {}
        while time.monotonic() < end:
            shown = self._run(["scontrol", "show", "job", job]).stdout
            fields = dict(re.findall(r"(\w+)=(\S*)", shown))
            state, reason = fields.get("JobState", ""), fields.get("Reason", "")
            if state and state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING",
                                       "SUSPENDED", "REQUEUED", "RESIZING"):
                return fields
            if state == "PENDING" and reason in NEVER:
                self._run(["scancel", job])
                raise AssertionError(f"job {job} cannot start here: {reason} ({NEVER[reason]})")
            time.sleep(0.5)
        self._run(["scancel", job])
        raise AssertionError(f"job {job} did not end within {timeout:.0f} s (state "
                             f"{fields.get('JobState', 'unknown')}); cancelled\n{self.logs()}")

    def stop(self) -> None:
        """Cancel what runs, then end the three daemons together: SIGTERM, up to 5 s to
        go, then SIGKILL (one after another, each waited for, took 6 s)."""
        self._run(["scancel", "--full", "--partition=course"])
        pids = []
        for name in ("slurmd", "slurmctld", "munged"):
            try:
                pids.append(int((self.root / f"{name}.pid").read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                continue
        for sig, pause in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 1.0)):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + pause
            while time.monotonic() < end and any(_alive(p) for p in pids):
                time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Running (a zombie, ended but not yet reaped, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def started() -> Slurm:
    """A one-node Slurm in a new short folder under /tmp, running."""
    root = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
    slurm = Slurm(root)
    try:
        return slurm.start()
    except BaseException:
        slurm.stop()
        raise


def remove(slurm: Slurm) -> None:
    slurm.stop()
    shutil.rmtree(slurm.root, ignore_errors=True)


@pytest.fixture(scope="module")
def slurm():
    """A real one-node Slurm for the module's tests (skipped, saying why, where it cannot
    run: not root, or Slurm's packages missing)."""
    why = missing()
    if why:
        pytest.skip(why)
    cluster = started()
    yield cluster
    remove(cluster)
