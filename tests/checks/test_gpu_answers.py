"""The answers of assignments 1-5 are framework code: the reference (from the instructor's
notebook) and every alternative correct answer of tests/checks/aN_solutions.py run unchanged
with the real framework on a GPU, and what can be checked on any GPU holds (positive times,
right values, one interval per step). Graded, the same functions run on the simulated GPU.

Needs only torch, numpy and pytest (no nbgrader, no Jupyter, no Paddle: the Paddle answers
skip where Paddle is missing); ``gpu``-marked, so it skips on a machine without a GPU.
Times are printed, never asserted.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from tests.checks import a1_solutions, a2_solutions, a3_solutions, a4_solutions, a5_solutions

pytestmark = pytest.mark.gpu

SOURCE = Path(__file__).resolve().parents[2] / "exercises" / "source"
SOLUTIONS = {"a1_independent_ops": a1_solutions, "a2_small_ops": a2_solutions,
             "a3_compute_comm": a3_solutions, "a4_profile_trace": a4_solutions,
             "a5_dependencies": a5_solutions}


def reference(assignment: str) -> dict[str, str]:
    """The instructor's solution cells, by grade id, read as JSON (no nbformat here)."""
    nb = json.loads((SOURCE / assignment / f"{assignment}.ipynb").read_text())
    return {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
            for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def answer_sets():
    for assignment, module in SOLUTIONS.items():
        yield pytest.param(assignment, {}, id=f"{assignment[:2]}-reference")
        for name, answers in module.CORRECT.items():
            yield pytest.param(assignment, answers, id=f"{assignment[:2]}-{name}")


def functions(assignment: str, answers: dict[str, str]) -> dict:
    """The notebook's answers, run in order in a namespace with what its imports cell gives
    them (NumPy, time, os)."""
    ns: dict = {"np": np, "time": time, "os": os, "__name__": f"gpu_{assignment}"}
    for gid, src in reference(assignment).items():
        exec(compile(answers.get(gid, src), f"<{assignment}:{gid}>", "exec"), ns)
    return ns


def framework(name: str):
    if name == "torch":
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU")
        return torch, lambda shape: torch.randn(*shape, device="cuda"), torch.cuda.synchronize
    paddle = pytest.importorskip("paddle")
    if paddle.device.cuda.device_count() == 0:
        pytest.skip("needs Paddle with a GPU")
    return paddle, lambda shape: paddle.randn(list(shape)), paddle.device.synchronize


def host(t) -> np.ndarray:
    return np.asarray(t if isinstance(t, np.ndarray) else t.numpy(), dtype=np.float64)


@pytest.mark.parametrize("assignment, answers", list(answer_sets()))
def test_the_answer_runs_unchanged_on_a_gpu(assignment, answers):
    ns = functions(assignment, answers)
    fw, randn, sync = framework(ns["FRAMEWORK"])
    clock = time.perf_counter
    if assignment == "a1_independent_ops":
        x = randn((2048, 2048))
        t = ns["time_work"](fw, clock, fw.matmul, x, x)
        out = ns["independent_ops_experiment"](fw, clock, x)
        print(f"{ns['FRAMEWORK']}: x @ x {t * 1e3:.3f} ms; {out}")
        assert isinstance(t, float) and t > 0
        assert set(out) >= {"one", "all", "parallel"} and out["one"] > 0 and out["all"] > 0
        assert isinstance(out["parallel"], (bool, np.bool_))
    elif assignment == "a2_small_ops":
        t = ns["time_on_streams"](fw, clock, randn((64, 64)), 64, 4)
        speedups = ns["stream_speedups"](fw, clock, randn((64, 64)), randn((2048, 2048)), 32, 4)
        print(f"{ns['FRAMEWORK']}: 64 small products on 4 streams {t * 1e3:.3f} ms; {speedups}")
        assert t > 0 and set(speedups) >= {"small", "large"}
        assert all(float(v) > 0 for v in speedups.values())
    elif assignment == "a3_compute_comm":
        xs = [randn((1024, 1024)) for _ in range(6)]
        sync()
        want = [host(x.cpu()) * 2 + 1 for x in xs]
        for name in ("sequential", "overlapped"):
            results, secs = ns[name](fw, clock, lambda x: 2 * x + 1, xs)
            print(f"{ns['FRAMEWORK']} {name}: {secs * 1e3:.3f} ms")
            assert secs > 0 and len(results) == len(xs)
            for got, w in zip(results, want):      # a copy that raced its product would differ
                np.testing.assert_allclose(host(got), w, rtol=1e-5, atol=1e-5)
    elif assignment == "a4_profile_trace":
        xs = [randn((1024, 1024)) for _ in range(5)]
        trace = ns["trace_with_events"](fw, lambda x: x @ x, xs)
        print(f"{ns['FRAMEWORK']}: {trace}")
        for row in ("compute", "copy"):
            spans = [tuple(map(float, s)) for s in trace[row]]
            assert len(spans) == len(xs) and all(0 <= s <= e for s, e in spans)
        comp = [tuple(map(float, s)) for s in trace["compute"]]
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(comp, comp[1:]))   # one stream: in order
        copy = [tuple(map(float, s)) for s in trace["copy"]]
        assert all(c[0] >= p[1] - 1e-6 for p, c in zip(comp, copy))      # after its product
        data = {"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 0, "dur": 100},
                                {"ph": "X", "cat": "gpu_memcpy", "ts": 60, "dur": 100}]}
        assert abs(ns["overlap_from_chrome_trace"](data, "kernel", "gpu_memcpy") - 40e-6) < 1e-12
    else:
        n = fw.cuda.device_count() if ns["FRAMEWORK"] == "torch" else fw.device.cuda.device_count()
        kind = "cuda" if ns["FRAMEWORK"] == "torch" else "gpu"
        devices = (f"{kind}:0", f"{kind}:{min(1, n - 1)}")   # one GPU: the same one twice
        rng = np.random.default_rng(5)
        inputs = {k: rng.standard_normal((128, 128), dtype=np.float32) for k in "ABCD"}
        A, B, C, D = (inputs[k].astype(np.float64) for k in "ABCD")
        want = (A @ B) @ C + (C @ D) @ A + (A @ B) @ (C @ D)
        t0 = clock()
        got = np.asarray(ns["run_dag"](fw, inputs, devices), dtype=np.float64)
        print(f"{ns['FRAMEWORK']} on {devices}: {(clock() - t0) * 1e3:.3f} ms")
        assert np.sqrt(np.sum((got - want) ** 2) / np.sum(want ** 2)) < 1e-3
