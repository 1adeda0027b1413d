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


@pytest.mark.skipif(os.geteuid() != 0, reason="process accounting needs root")
def test_the_commands_and_its_childrens_cpu_are_summed_by_kind():
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN!r}, '0.6', 'run.worker'])"
    cmd = [sys.executable, "-c", f"exec({BURN!r}); {child}", "0.4"]
    # process accounting is the whole machine's: a run whose records miss the command's own
    # process (seen once beside the other test process) is run once more, and judged then
    for _ in range(2):
        out = subprocess.run([sys.executable, str(SCRIPT), "--", *cmd], capture_output=True,
                             text=True, timeout=120, check=True).stdout
        if re.search(r"processes\s+the command itself", out):
            break
    # process accounting's record can fall short of what the burn itself measured (a 0.4 s
    # burn was once recorded as 0.3 s, in a CI-style run), so the lower bounds are half of
    # each burn; a kind summed wrongly (0, or both in one) still fails
    assert 0.2 <= _seconds(out, "the command itself") < 2.0
    assert 0.3 <= _seconds(out, "grading workers, their feedback children, the spawner") < 2.5
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
