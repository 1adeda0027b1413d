"""bench/grading_cpu.py: a command's processes' CPU time by kind, from process accounting.

Process accounting records every process on the machine, so this asserts only on the
command's own processes: a parent that burns CPU and a child whose command line makes it a
grading worker's kind."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "grading_cpu.py"
BURN = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < float(sys.argv[1]): pass\n"


def _seconds(out: str, kind: str) -> float:
    m = re.search(r"^\s+([\d.]+) s\s+\d+ processes\s+" + re.escape(kind), out, re.M)
    assert m, out
    return float(m.group(1))


def _load():
    import importlib.util
    spec = importlib.util.spec_from_file_location("grading_cpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(mod, pid: int, utime: int, stime: int, comm: bytes = b"python3") -> bytes:
    """One struct acct_v3 record (times already comp_t-encoded)."""
    head = mod.RECORD.pack(0, 3, 0, 0, 0, 0, pid, 1, 0, 0.0, utime, stime)
    return head + bytes(48 - len(head)) + comm.ljust(16, b"\0")


def test_records_are_summed_by_kind_from_their_command_lines():
    mod = _load()
    workers = "grading workers, their feedback children, the spawner"
    data = b"".join([
        _record(mod, 10, 40, 2),                       # the command itself: 0.42 s
        _record(mod, 11, 50, 10),                      # a worker: 0.60 s
        _record(mod, 12, (1 << 13) | 100, 0),          # a worker: comp_t 100 * 8 = 8.00 s
        _record(mod, 13, 7, 0, b"ipykernel_launc"),    # named by ac_comm only: a kernel
        _record(mod, 14, 3, 0, b"sleep"),              # unnamed: other (sleep)
        _record(mod, 99, 30, 0),                       # this script, turning accounting off
    ])
    names = {10: "python -c burn", 11: "python -m grader.grading.run.worker",
             12: "python -m grader.grading.run.spawn x", 99: "grading_cpu.py -- run.worker"}
    total, count = mod.tally(data + b"\0" * 10, names, own=10, me=99)   # a torn last record is skipped
    assert total["the command itself"] == pytest.approx(0.42) and count["the command itself"] == 1
    assert total[workers] == pytest.approx(8.60) and count[workers] == 2
    kernel = "kernel (sandbox launcher, bwrap, confine, ipykernel)"
    assert total[kernel] == pytest.approx(0.07) and count[kernel] == 1
    assert total["other (sleep)"] == pytest.approx(0.03) and sum(count.values()) == 5


@pytest.mark.skipif(os.geteuid() != 0, reason="process accounting needs root")
def test_the_command_and_its_child_are_recorded_each_as_its_kind():
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN!r}, '0.6', 'run.worker'])"
    cmd = [sys.executable, "-c", f"exec({BURN!r}); {child}", "0.4"]
    # process accounting is the whole machine's: a run whose records miss the command's own
    # process (seen once beside the other test process) is run once more, and judged then.
    # The seconds are the kernel's tick samples, which on a busy virtual machine fell to a
    # quarter of the burn (CI: 0.4 s recorded as 0.1 s), so what is asserted here is the
    # processes' kinds and counts; the sums are checked exactly on records made up above
    for _ in range(2):
        out = subprocess.run([sys.executable, str(SCRIPT), "--", *cmd], capture_output=True,
                             text=True, timeout=120, check=True).stdout
        if re.search(r"processes\s+the command itself", out):
            break
    assert re.search(r"^\s+[\d.]+ s\s+1 processes\s+the command itself$", out, re.M), out
    # (at least one: the other test process's grading workers are recorded too, when it grades)
    assert re.search(r"^\s+[\d.]+ s\s+[1-9]\d* processes\s+grading workers", out, re.M), out
    assert _seconds(out, "the command itself") < 2.0, out    # not the child's burn too
    assert re.search(r"^wall clock [\d.]+ s, exit code 0; \d+ processes ended", out, re.M), out
    assert "machine busy, % per second:" in out


def test_without_a_command_it_says_how_to_use_it():
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "process accounting" in r.stdout


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_prints_how_to_use_it_and_runs_nothing(flag):
    r = subprocess.run([sys.executable, str(SCRIPT), flag], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "Where grading's CPU goes" in r.stdout, r
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="process accounting needs root")
def test_a_command_that_cannot_start_is_named_and_leaves_no_record_behind(tmp_path):
    import tempfile
    before = set(Path(tempfile.gettempdir()).glob("grading-acct-*"))
    r = subprocess.run([sys.executable, str(SCRIPT), "--", str(tmp_path / "no-such-command")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "cannot start" in r.stderr and "no-such-command" in r.stderr, r
    assert "Traceback" not in r.stderr, r.stderr
    assert set(Path(tempfile.gettempdir()).glob("grading-acct-*")) <= before
