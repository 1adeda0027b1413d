"""A kernel that imported paddle ends on SIGTERM without Paddle's "FatalError" block
(review, round 3: it printed into the book build's log)."""
import sys
import types

import pytest

from grader.lab import paddle_exits_quietly


class _Events:
    def __init__(self):
        self.callbacks = []

    def register(self, event, fn):
        assert event == "post_run_cell"
        self.callbacks.append(fn)

    def unregister(self, event, fn):
        self.callbacks.remove(fn)

    def trigger(self):
        for fn in list(self.callbacks):
            fn(None)


def test_after_the_cell_that_imports_paddle_its_handlers_are_switched_off(monkeypatch):
    shell = types.SimpleNamespace(events=_Events())
    paddle_exits_quietly(shell)
    monkeypatch.delitem(sys.modules, "paddle", raising=False)
    shell.events.trigger()                      # a cell without paddle: nothing yet
    assert len(shell.events.callbacks) == 1
    calls = []
    monkeypatch.setitem(sys.modules, "paddle", types.SimpleNamespace(
        disable_signal_handler=lambda: calls.append(1)))
    shell.events.trigger()                      # the cell that imported it
    shell.events.trigger()
    assert calls == [1] and shell.events.callbacks == []


@pytest.mark.slow   # a process that imports paddle: about 10 s
def test_paddle_stopped_with_sigterm_prints_no_fatal_error_once_switched_off(tmp_path):
    import subprocess
    code = ("import os, signal, time, paddle\n"
            "paddle.disable_signal_handler()\n"
            "os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == -15 and "FatalError" not in p.stderr, p.stderr[-500:]
