"""The chapter's paddle.DataParallel scripts, started with python -m
paddle.distributed.launch (gloo on this CPU machine) as the page starts them, and the
Slurm and Kubernetes files that start them on a cluster."""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from ._run import BIN, SCRIPTS, fake_slurm, finish, free_port, run, start
from ._slurm import GPUS, slurm  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow
LAUNCH = ["python", "-m", "paddle.distributed.launch"]
SCRIPT = str(SCRIPTS / "ddp_paddle.py")


def _state(path: Path) -> dict:
    from grader.lab import get_backend

    get_backend("paddle")                  # imports Paddle with its notices kept quiet
    import paddle

    state = paddle.load(str(path))
    return {"epoch": state["epoch"],
            "model": {k: v.numpy() for k, v in state["model"].items()}}


def _initial_weights() -> dict:
    sys.path.insert(0, str(SCRIPTS))
    try:
        import ddp_paddle
    finally:
        sys.path.remove(str(SCRIPTS))
    return {k: v.numpy() for k, v in ddp_paddle.make_model().state_dict().items()}


def _assert_same_model(a: Path, b: Path, epochs: int) -> None:
    """Two checkpoints hold the same trained weights (float32 rounding apart)."""
    sa, sb = _state(a), _state(b)
    assert sa["epoch"] == sb["epoch"] == epochs
    assert set(sa["model"]) == set(sb["model"])
    for name, w in sa["model"].items():
        np.testing.assert_allclose(w, sb["model"][name], rtol=1e-5, atol=1e-6)
    start = _initial_weights()["0.weight"]
    assert np.abs(sa["model"]["0.weight"] - start).max() > 1e-3, "it did not train"


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """The reference: the script in one process, no launcher, two epochs."""
    out = tmp_path_factory.mktemp("single")
    p = run(["python", SCRIPT, "--epochs", "2", "--checkpoint", "single.pdparams"], out)
    assert "1 process(es) x 32 rows" in p.stdout
    return out / "single.pdparams"


def test_one_process_then_two_launched_resuming_with_no_sync_train_like_one(
        tmp_path, one_process):
    """As the page runs it: one process trains the first epoch and writes the
    checkpoint; two processes under the launcher load it, accumulate with no_sync and
    train the second; the result equals one process's two epochs. One launch checks the
    launcher's environment, the resume, accumulation and the equality."""
    args = [SCRIPT, "--accum", "4", "--checkpoint", "acc.pdparams"]
    first = run(["python"] + args + ["--epochs", "1"], tmp_path)
    assert "1 process(es) x 8 rows x 4 micro-batch(es) = 32 rows" in first.stdout
    assert _state(tmp_path / "acc.pdparams")["epoch"] == 1
    second = run(LAUNCH + ["--nproc_per_node", "2", "--log_dir", "log"] + args
                 + ["--epochs", "2"], tmp_path)       # finds the checkpoint
    # The launcher echoes rank 0; every rank's output is in its log.
    assert re.search(r"rank 0 of 2: endpoint .*, gloo on cpu", second.stdout)
    assert re.search(r"rank 1 of 2: endpoint .*, gloo on cpu",
                     (tmp_path / "log" / "workerlog.1").read_text())
    assert "2 process(es) x 4 rows x 4 micro-batch(es) = 32 rows" in second.stdout
    assert "at epoch 1" in second.stdout and "epoch 0:" not in second.stdout
    _assert_same_model(tmp_path / "acc.pdparams", one_process, epochs=2)


def test_a_global_batch_that_does_not_split_is_refused_with_a_message(tmp_path):
    p = run(["python", SCRIPT, "--global-batch", "30", "--accum", "4"], tmp_path,
            check=False)
    assert p.returncode != 0
    assert "does not split into 1 processes x 4 micro-batches" in p.stderr


def test_two_nodes_of_one_process_each_through_the_launchers_flags(tmp_path,
                                                                     one_process):
    master = f"127.0.0.1:{free_port()}"
    nodes = [start(LAUNCH + ["--nnodes", "2", "--nproc_per_node", "1", "--master", master,
                             "--log_dir", f"log/node{n}", SCRIPT, "--checkpoint",
                             "nodes.pdparams"], tmp_path) for n in (0, 1)]
    outs = finish(nodes)
    assert sorted(re.findall(r"rank (\d) of 2", "".join(outs))) == ["0", "1"]
    _assert_same_model(tmp_path / "nodes.pdparams", one_process, epochs=2)


def test_the_slurm_batch_script_runs_one_launcher_per_node(tmp_path, one_process):
    fake = fake_slurm(tmp_path)
    work = tmp_path / "submit"                  # the folder sbatch is run from
    shutil.copytree(SCRIPTS, work, ignore=shutil.ignore_patterns("__pycache__"))
    ckpt = tmp_path / "slurm.pdparams"
    p = run(["bash", "ddp_paddle.sbatch"], work, check=False,
            PATH=f"{fake}:{BIN}:/usr/bin:/bin", LOGDIR=str(tmp_path), SLURM_NNODES="2",
            SLURM_JOB_NODELIST="node[1-2]", SLURM_GPUS_ON_NODE="1", SLURM_JOB_ID="4242",
            MASTER_PORT=str(free_port()), CHECKPOINT=str(ckpt),
            logs=tuple(tmp_path / f"node{i}.log" for i in (0, 1)))
    logs = [(tmp_path / f"node{i}.log").read_text() for i in (0, 1)]
    assert p.returncode == 0, "\n".join(log[-3000:] for log in logs)
    for node in (0, 1):                         # each node kept its own log folder
        assert (work / "log" / "4242" / str(node) / "workerlog.0").exists()
    _assert_same_model(ckpt, one_process, epochs=2)


def test_the_slurm_batch_script_trains_when_a_real_slurm_runs_it(tmp_path, one_process, slurm):
    """sbatch on a real one-node Slurm (tests/chapters/scripts/_slurm.py), the node and GPU
    counts overridden on sbatch's command line: one launcher starts two ranks on gloo, logs
    in the node's own folder; state, exit code and output are Slurm's."""
    work = tmp_path / "submit"                  # the folder sbatch is run from
    shutil.copytree(SCRIPTS, work, ignore=shutil.ignore_patterns("__pycache__"))
    ckpt = tmp_path / "real-slurm.pdparams"
    job = slurm.sbatch(work / "ddp_paddle.sbatch", work,
                       ["--nodes=1", f"--gpus-per-node={GPUS}", f"--cpus-per-task={os.cpu_count()}"],
                       MASTER_PORT=str(free_port()), CHECKPOINT=str(ckpt))
    logs = sorted((work / "log" / job.id / "0").glob("workerlog.*"))
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), (
        job.output[-3000:] + "".join(f.read_text()[-2000:] for f in logs) + slurm.logs())
    assert [f.name for f in logs] == ["workerlog.0", "workerlog.1"]
    _assert_same_model(ckpt, one_process, epochs=2)


def test_the_paddlejob_command_trains_with_the_operators_environment(tmp_path,
                                                                      one_process):
    import yaml

    job = yaml.safe_load((SCRIPTS / "ddp_paddle_job.yaml").read_text())
    assert job["kind"] == "PaddleJob"
    spec = job["spec"]["paddleReplicaSpecs"]["Worker"]
    container = spec["template"]["spec"]["containers"][0]
    assert container["name"] == "paddle"
    volume = container["volumeMounts"][0]["mountPath"]
    master = f"127.0.0.1:{free_port()}"
    procs = []
    for rank in range(spec["replicas"]):
        # What the Kubeflow Training Operator sets in a collective PaddleJob's pods (the
        # first Worker is the master), plus the container's own env; one process per pod
        # because this machine has no GPUs, and each pod its own log folder.
        env = {e["name"]: e["value"] for e in container.get("env", [])}
        env.update(PADDLE_MASTER=master, PADDLE_NNODES=str(spec["replicas"]),
                   PADDLE_JOB_ID=job["metadata"]["name"], PADDLE_NPROC_PER_NODE="1",
                   PADDLE_LOG_DIR=str(tmp_path / f"pod{rank}"))
        cmd = [part.replace(volume, str(tmp_path)) for part in container["command"]]
        procs.append(start(cmd, SCRIPTS, **env))
    finish(procs)
    _assert_same_model(tmp_path / "ddp_paddle.pdparams", one_process, epochs=2)


@pytest.fixture(scope="module")
def comm(tmp_path_factory) -> dict:
    """The communication script under the launcher, with the reducer's log switched on;
    the all-reduces each experiment made are counted in rank 0's log, as the page does."""
    out = tmp_path_factory.mktemp("comm")
    run(LAUNCH + ["--nproc_per_node", "2", "--log_dir", "log",
                  str(SCRIPTS / "ddp_comm_paddle.py"), "--out", "comm.json"], out,
        GLOG_minloglevel="0", GLOG_vmodule="reducer=4")
    report = json.loads((out / "comm.json").read_text())
    parts = re.split(r"^=== (.*)$", (out / "log" / "workerlog.0").read_text(), flags=re.M)
    counts = [part.count("start fused_allreduce") for part in parts[2::2]]
    for run_, count in zip(report["accumulation"], counts):
        run_["allreduces"] = count
    return report


def test_no_sync_cuts_the_all_reduces_by_the_accumulation_factor(comm):
    plain, naive, synced = comm["accumulation"]
    assert plain["steps"] == naive["steps"] == synced["steps"] == 16
    assert naive["backwards"] == synced["backwards"] == 4 * plain["backwards"]
    assert naive["allreduces"] == naive["backwards"]         # one group per backward
    assert synced["allreduces"] * synced["accum"] == naive["allreduces"]
    assert synced["allreduces"] == plain["allreduces"] == 16
    assert naive["max_diff"] < 1e-5 and synced["max_diff"] < 1e-5


def test_groups_hold_whole_parameters_and_follow_the_buffer_sizes(comm):
    default, one, half = comm["groups"]
    assert default["groups"] == [["0.weight"], ["0.bias", "2.weight", "2.bias"]]
    assert one["groups"] == half["groups"] == [["0.weight"], ["0.bias", "2.weight"],
                                               ["2.bias"]]
    for g in comm["groups"]:
        packed = [n for group in g["groups"] for n in group]
        assert sorted(packed) == sorted(g["sizes"])


def test_buffers_are_synchronized_when_wrapping_and_then_kept_per_rank(comm):
    b = comm["buffers"]
    assert b["weight_before_wrapping"] > 0
    assert b["weight_after_wrapping"] == b["weight_after_4_steps"] == 0
    assert b["running_mean_after_4_steps"] > 0


def test_fleets_fp16_allreduce_does_not_touch_data_parallel_gradients(comm):
    assert comm["fp16_allreduce_grad_diff"] == 0


def test_a_step_that_leaves_parameters_unused_needs_find_unused_parameters(comm):
    found, not_found = comm["unused"]
    assert found == {"find_unused_parameters": True, "error": None}
    assert "find_unused_parameters=True" in not_found["error"]
