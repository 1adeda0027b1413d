"""The automatic-parallelism chapter's scripts, launched as the page launches them
(``torchrun``, ``python -m paddle.distributed.launch``; gloo on CPU ranks), at small
sizes: they compute what the page says they compute.

One copy of each script: these are the files the page shows with ``literalinclude``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.lab.core import paddle_log

from grader.lab.auto_parallel import measure as plan_measure
from grader.lab import planner as P

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).resolve().parents[2] / "chapters" / "scripts"
BIN = Path(sys.executable).parent
TIMEOUT = 600


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    return env


def torchrun(script: str, ranks: int, tmp: Path, *args: str) -> dict:
    out = tmp / "out.json"
    p = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node",
                        str(ranks), str(SCRIPTS / script), "--out", str(out), *args],
                       capture_output=True, text=True, env=_env(), timeout=TIMEOUT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(out.read_text())


def paddle_launch(script: str, ranks: int, tmp: Path, *args: str,
                  out: bool = True) -> tuple[dict | None, Path]:
    logs, result = tmp / "log", tmp / "out.json"
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node",
           str(ranks), "--log_dir", str(logs), str(SCRIPTS / script), *args]
    if out:
        cmd += ["--out", str(result)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=TIMEOUT)
    log = logs / "workerlog.0"
    assert p.returncode == 0, (log.read_text()[-3000:] if log.exists() else p.stdout[-3000:])
    return (json.loads(result.read_text()) if out else None), log


# ------------------------------------------------------------------ the 1-D mesh
@pytest.fixture(scope="module")
def torch_semi_auto(tmp_path_factory):
    return torchrun("semi_auto_torch.py", 2, tmp_path_factory.mktemp("torch_semi"))


@pytest.fixture(scope="module")
def paddle_semi_auto(tmp_path_factory):
    # --modes: Paddle's automatic modes too, in the same launch, as the page runs it
    return paddle_launch("semi_auto_paddle.py", 2, tmp_path_factory.mktemp("paddle_semi"),
                         "--modes")


def test_torch_reshards_are_exact_and_run_the_collectives_the_page_names(torch_semi_auto):
    rows = {(r["src"], r["dst"]): r for r in torch_semi_auto["reshards"]}
    assert all(r["exact"] for r in rows.values())
    ops = {k: r["collectives"] for k, r in rows.items()}
    assert ops[("Shard(dim=0)", "Replicate()")] == {"all_gather_into_tensor": 1}
    assert ops[("Partial(sum)", "Replicate()")] == {"all_reduce": 1}
    assert ops[("Replicate()", "Shard(dim=0)")] == {}
    assert ops[("Partial(sum)", "Shard(dim=0)")] == {"reduce_scatter_tensor": 1}
    assert rows[("Shard(dim=0)", "Replicate()")]["local_in"] == [128, 128]


def test_paddle_reshards_are_exact_or_name_the_kernel_the_cpu_build_lacks(
        paddle_semi_auto):
    result, log = paddle_semi_auto
    rows = {(r["src"], r["dst"]): r for r in result["reshards"]}
    for r in rows.values():
        assert r["exact"] or "Unimplemented" in r["error"], r
    assert rows[("Shard(dim=0)", "Replicate()")]["exact"]
    seen = paddle_log.collectives(log)
    assert seen["Shard(dim=0) -> Replicate()"] == {"all_gather": 1}
    assert seen["Partial(reduce_type=SUM) -> Replicate()"] == {"all_reduce": 1}
    assert seen["Replicate() -> Shard(dim=0)"] == {}


def _trains_like_one_device(r: dict) -> None:
    assert r["loss_diff"] <= 1e-5 and r["weight_diff"] <= 1e-5, r
    assert r["losses"][-1] < r["losses"][0]          # it did train


def test_torch_column_row_mlp_equals_single_device_training(torch_semi_auto):
    r = torch_semi_auto["tp_mlp"]
    _trains_like_one_device(r)
    assert r["local_shapes"] == [[64, 64], [32, 64]]   # (out, in): half of each weight
    assert r["collectives"] == {"forward": {"all_reduce": 1}, "backward": {},
                                "optimizer step": {}}


def test_paddle_column_row_mlp_equals_single_device_training(paddle_semi_auto):
    result, log = paddle_semi_auto
    r = result["tp_mlp"]
    _trains_like_one_device(r)
    assert r["local_shapes"] == [[64, 64], [64, 32]]   # (in, out): half of each weight
    assert paddle_log.collectives(log)["forward"] == {"all_reduce": 1}


# ------------------------------------------------------------------ the 2-D mesh and sweep
PLANS = ["2x2:col,row,R", "4x1:R,R,R", "1x4:col,R,row"]
SMALL = ["--dims", "16,32,32,8", "--batch", "8", "--steps", "1", "--repeats", "2",
         "--plans", *PLANS]


@pytest.fixture(scope="module")
def torch_2d(tmp_path_factory):
    return torchrun("mesh2d_torch.py", 4, tmp_path_factory.mktemp("torch_2d"), *SMALL)


@pytest.fixture(scope="module")
def paddle_2d(tmp_path_factory):
    return paddle_launch("mesh2d_paddle.py", 4, tmp_path_factory.mktemp("paddle_2d"),
                         *SMALL)


def _every_plan_trains_like_one_device(result: dict) -> None:
    assert [r["plan"] for r in result["plans"]] == PLANS
    for r in result["plans"]:
        assert r["loss_diff"] <= 1e-5 and r["weight_diff"] <= 1e-5, r
        assert len(r["step_s"]) == 1 and len(r["unsplit_step_s"]) == 1


def test_torch_2d_mesh_equals_single_device_and_runs_the_planned_collectives(torch_2d):
    _every_plan_trains_like_one_device(torch_2d)
    for r in torch_2d["plans"]:
        planned = plan_measure.planned_collectives(torch_2d["dims"], torch_2d["batch"],
                                                   P.Strategy.parse(r["plan"]))
        assert plan_measure._normalise(r["collectives"]) == planned, r


def test_paddle_2d_mesh_equals_single_device_training(paddle_2d):
    result, log = paddle_2d
    _every_plan_trains_like_one_device(result)
    seen = paddle_log.collectives(log)
    assert seen["2x2:col,row,R forward"] == {"all_reduce": 1}
    assert seen["2x2:col,row,R optimizer step"] == {"all_reduce": 3}   # one per weight
    assert seen["4x1:R,R,R forward"] == {}


def _fits_what_it_measured(sweep: dict) -> None:
    rows = sweep["rows"]
    assert {(r["op"], r["ranks"]) for r in rows} == {(op, p) for op in
                                                    ("all_reduce", "all_gather")
                                                    for p in (2, 4)}
    assert all(r["s"] > 0 for r in rows)
    fit = plan_measure.fit_sweep(sweep)
    assert fit.latency >= 0 and fit.bandwidth > 0
    # least squares: no nearby latency or bandwidth explains the measurements better

    def loss(lat, bw):
        return sum(((P.collective_time(op, n, p, bw, lat) - t) / t) ** 2
                   for op, p, n, t in fit.samples)

    best = loss(fit.latency, fit.bandwidth)
    for lat, bw in ((fit.latency * 1.1, fit.bandwidth), (fit.latency * 0.9, fit.bandwidth),
                    (fit.latency, fit.bandwidth * 1.1), (fit.latency, fit.bandwidth * 0.9)):
        assert loss(lat, bw) >= best * (1 - 1e-9)


def test_torch_sweep_times_every_collective_and_the_fit_is_a_least_squares_fit(torch_2d):
    _fits_what_it_measured(torch_2d["sweep"])


def test_paddle_sweep_times_every_collective_and_the_fit_is_a_least_squares_fit(
        paddle_2d):
    _fits_what_it_measured(paddle_2d[0]["sweep"])


def test_the_calibrated_planner_compares_every_plan_that_ran(torch_2d):
    cluster, _ = plan_measure.calibrate(torch_2d["sweep"], torch_2d)
    rows = plan_measure.compare(torch_2d, cluster)
    assert [r.strategy.plan for r in rows] == PLANS and all(r.as_planned for r in rows)
    assert all(r.predicted.step_s > 0 and r.measured_s > 0 for r in rows)


# ------------------------------------------------------------------ Paddle's automatic modes
def test_paddles_automatic_modes_each_report_what_happened(paddle_semi_auto):
    _, log = paddle_semi_auto            # they ran after the semi-automatic part
    semi, heading, modes = paddle_log.script_output(log).partition(
        "Paddle's automatic modes:\n")
    assert heading and "largest difference" in semi
    # their marker ends the MLP's last section: what they log is not counted as its own
    assert "automatic modes" in paddle_log.sections(log)
    lines = modes.splitlines()
    for name in ("dist.to_distributed", 'Engine, auto_mode="full_random"',
                 "dist.to_static"):
        line = next(line for line in lines if line.startswith(name))
        assert "stopped:" in line or "trained" in line or "placed" in line, line
