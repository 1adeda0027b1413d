"""_run.run, the tests' way of starting a chapter's script: a run past its time limit is
stopped with every process it started, and fails with what it printed and its logs."""
import time

import pytest

from tests.chapters.scripts._run import run


def test_a_run_past_its_limit_is_stopped_whole_and_shows_its_logs(tmp_path):
    log = tmp_path / "node0.log"
    log.write_text("waiting for the rendezvous\n")
    left = tmp_path / "left-behind"       # written by a child, were it still running
    script = f"(sleep 2; touch {left}) & echo started; sleep 100"
    t0 = time.monotonic()
    with pytest.raises(AssertionError) as err:
        run(["bash", "-c", script], tmp_path, timeout=1, logs=(log, tmp_path / "node1.log"))
    assert time.monotonic() - t0 < 10
    msg = str(err.value)
    assert "did not end within 1 s" in msg and "started" in msg, msg
    assert "waiting for the rendezvous" in msg and "node1.log: not written" in msg, msg
    time.sleep(2.5)
    assert not left.exists()


def test_a_failed_run_names_its_exit_code_and_output(tmp_path):
    with pytest.raises(AssertionError, match=r"exited with 3:\n.*oops"):
        run(["bash", "-c", "echo oops; exit 3"], tmp_path)
    assert run(["bash", "-c", "exit 3"], tmp_path, check=False).returncode == 3
