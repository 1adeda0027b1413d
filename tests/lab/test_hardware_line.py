"""The hardware line under every chapter title (``grader.lab.hardware_summary``)."""
import builtins
import importlib.util
import subprocess
import sys

import pytest

from grader.lab import hardware_summary


def test_the_hardware_line_names_the_cpu_and_each_frameworks_version():
    import paddle
    import torch

    text = hardware_summary()
    assert "cores" in text.splitlines()[1]
    assert f"PyTorch {torch.__version__}" in text
    assert f"PaddlePaddle {paddle.__version__}" in text


def test_a_framework_that_is_not_installed_is_named_not_installed(monkeypatch):
    # A GPU machine may carry PyTorch only: the hardware line still prints, and says so.
    import sys

    monkeypatch.delitem(sys.modules, "grader.lab.core.backends.paddle_backend", raising=False)
    real_import = builtins.__import__

    def no_paddle(name, *args, **kwargs):
        if name == "paddle" or name.startswith("paddle."):
            raise ModuleNotFoundError("No module named 'paddle'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_paddle)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None
                        if name == "paddle" else real_find_spec(name, *a))
    text = hardware_summary()
    assert "PaddlePaddle: not installed" in text
    assert "PyTorch " in text


def test_with_a_page_it_adds_the_gpu_cells_and_without_the_chapters_it_still_prints():
    text = hardware_summary("multidevice")
    assert "PyTorch GPU cells (" in text and "Paddle GPU cells (" in text
    assert hardware_summary("no_such_chapter") == hardware_summary()


def test_paddles_cpu_wheel_is_named_without_importing_paddle():
    # Paddle's CPU wheel sees no GPU; the line reads its version from the package's
    # metadata, and a kernel that never uses Paddle does not pay for importing it.
    import paddle

    # With a page whose GPU cells include Paddle's, the count of those this machine can
    # run comes from the same metadata.
    code = ("import sys; from grader.lab import hardware_summary; "
            "print(hardware_summary()); print('paddle' in sys.modules); "
            "print(hardware_summary('context_expert')); print('paddle' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out.count("False") == 2 and out[-1] == "False"
    assert f"  PaddlePaddle {paddle.__version__}: no GPU" in out
    assert any(line.startswith("  Paddle GPU cells (") for line in out)


def test_torchs_cpu_wheel_is_named_without_importing_torch():
    # PyTorch's CPU wheel (version label +cpu) sees no GPU either: with or without a
    # page, the line reads it from the metadata and the kernel does not import PyTorch.
    import torch

    if not torch.__version__.endswith("+cpu"):
        pytest.skip(f"PyTorch {torch.__version__} is not the CPU-only wheel")
    code = ("import sys; from grader.lab import hardware_summary; "
            "print(hardware_summary('context_expert')); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[-1] == "False"
    assert f"  PyTorch {torch.__version__}: no GPU" in out
    assert any(line.startswith("  PyTorch GPU cells (") for line in out)
