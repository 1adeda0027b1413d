"""The scripts the chapters show in full are the scripts these tests launch, with the
frameworks' own launchers, on gloo: one copy of each, never a page version and a test
version."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(OMP_NUM_THREADS="1", GLOG_minloglevel="2")
    return env


def _page_command(page: str, launcher: str) -> str:
    """The launch command as the page's cell spells it (``!`` and continuations gone)."""
    text = (CHAPTERS / page).read_text().replace("\\\n", " ")
    line = next(l for l in text.splitlines() if l.startswith("!") and launcher in l)
    return re.sub(r"\s+", " ", line[1:]).strip()


@pytest.mark.slow
def test_hello_torch_all_reduces_across_two_ranks_with_torchrun(tmp_path):
    cmd = _page_command("toolkit.md", "torchrun")
    assert "--nproc_per_node 2" in cmd and cmd.endswith("hello_torch.py")
    out = subprocess.run(cmd, shell=True, cwd=CHAPTERS, env=_env(), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = sorted(l for l in out.stdout.splitlines() if l.startswith("rank "))
    assert len(lines) == 2, out.stdout   # one whole line per rank (one write each)
    for rank, line in enumerate(lines):
        assert line.startswith(f"rank {rank} of 2 on ")
        assert line.endswith("[3.0, 3.0, 3.0, 3.0]")


@pytest.mark.slow
def test_hello_paddle_all_reduces_across_two_ranks_with_paddles_launcher(tmp_path):
    cmd = _page_command("toolkit.md", "paddle.distributed.launch")
    assert "--nproc_per_node 2" in cmd and cmd.endswith("hello_paddle.py")
    # the page's command, with the logs kept out of the chapters folder
    cmd = cmd.replace("hello_paddle.py", f"--log_dir {tmp_path / 'log'} "
                      f"{CHAPTERS / 'hello_paddle.py'}")
    out = subprocess.run(cmd, shell=True, cwd=tmp_path, env=_env(), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in range(2):
        log = (tmp_path / "log" / f"workerlog.{rank}").read_text()
        line = [l for l in log.splitlines() if l.startswith("rank ")][-1]
        assert line == f"rank {rank} of 2 on cpu: [3.0, 3.0, 3.0, 3.0]" or \
            line.startswith(f"rank {rank} of 2 on gpu")


def test_torchrun_started_by_the_tests_keeps_its_logs_in_the_tests_folder(torchrun_logs, tmp_path):
    """The suite's torchrun launches leave no torchelastic_* folder in the temp folder."""
    import tempfile

    script = tmp_path / "hello.py"
    script.write_text("import os\nprint('rank', os.environ['RANK'])\n")
    before = set(Path(tempfile.gettempdir()).glob("torchelastic_*"))
    torchrun = Path(sys.executable).with_name("torchrun")
    r = subprocess.run([str(torchrun), "--nproc-per-node", "1", str(script)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert set(Path(tempfile.gettempdir()).glob("torchelastic_*")) == before
    assert any(Path(torchrun_logs).iterdir())      # its logs went here instead
