"""Paddle's dynamic-graph mode is per thread: a thread the course starts turns it on first
(grader/lab/core/threads.py). Each case runs in a fresh interpreter: where paddle was first
imported decides what every later thread gets."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLOG_minloglevel="2")
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


FIRST_IMPORT_IN_A_THREAD = """
    import threading
    box = {}
    def first():                      # paddle imported in a thread that then ends
        import paddle
        x = paddle.to_tensor([1.0, 2.0])
        x.stop_gradient = False
        box["x"] = x
    t = threading.Thread(target=first); t.start(); t.join()
    import paddle
"""


@pytest.mark.slow
def test_after_paddle_was_imported_in_an_ended_thread_new_threads_are_static_until_made_ready():
    out = _run(FIRST_IMPORT_IN_A_THREAD + """
    from grader.lab.core.threads import framework_ready, ready_thread_target
    seen = []
    def plain():
        seen.append(("plain", paddle.in_dynamic_mode()))
    def ready():
        seen.append(("ready", paddle.in_dynamic_mode()))
        x = box["x"]                              # a tensor from the ended thread
        (g,) = paddle.grad([(x * x).sum()], [x])
        seen.append(("grad", g.numpy().tolist()))
        inner = threading.Thread(target=lambda: seen.append(("inherited", paddle.in_dynamic_mode())))
        inner.start(); inner.join()
    for target in (plain, ready_thread_target(ready), ready_thread_target(ready)):
        t = threading.Thread(target=target); t.start(); t.join()
    print(seen)
    """)
    assert out.strip() == str([("plain", False), ("ready", True), ("grad", [2.0, 4.0]),
                               ("inherited", True), ("ready", True), ("grad", [2.0, 4.0]),
                               ("inherited", True)])


def test_framework_ready_never_imports_paddle_and_leaves_torch_alone():
    out = _run("""
    import sys, threading
    import torch
    from grader.lab.core.threads import framework_ready
    t = threading.Thread(target=framework_ready); t.start(); t.join()
    framework_ready()
    print("paddle" in sys.modules, torch.ones(2).sum().item())
    """)
    assert out.strip() == "False 2.0"
