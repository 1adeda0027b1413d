"""The chapter's DDP scripts, started with torchrun (gloo on this CPU machine) as the page
starts them, and the Slurm and Kubernetes files that start them on a cluster."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from ._run import BIN, SCRIPTS, fake_slurm, finish, free_port, run, start
from ._slurm import GPUS, slurm  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow
TORCHRUN = str(BIN / "torchrun")
SCRIPT = str(SCRIPTS / "ddp_torch.py")


def _weights(path: Path) -> dict:
    import torch

    return torch.load(path)


def _initial_weights() -> dict:
    sys.path.insert(0, str(SCRIPTS))
    try:
        import ddp_torch
    finally:
        sys.path.remove(str(SCRIPTS))
    return ddp_torch.make_model().state_dict()


def _assert_same_model(a: Path, b: Path, epochs: int) -> None:
    """Two checkpoints hold the same trained weights (float32 rounding apart)."""
    import torch

    sa, sb = _weights(a), _weights(b)
    assert sa["epoch"] == sb["epoch"] == epochs
    assert set(sa["model"]) == set(sb["model"])
    for name, w in sa["model"].items():
        torch.testing.assert_close(w, sb["model"][name], rtol=1e-5, atol=1e-6)
    start = _initial_weights()["0.weight"]
    assert (sa["model"]["0.weight"] - start).abs().max() > 1e-3, "it did not train"


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """The reference: the script in one process, no launcher, two epochs."""
    out = tmp_path_factory.mktemp("single")
    p = run(["python", SCRIPT, "--epochs", "2", "--checkpoint", "single.pt"], out)
    assert "1 process(es) x 32 rows" in p.stdout
    return out / "single.pt"


def test_one_process_then_two_under_torchrun_resuming_with_no_sync_train_like_one(
        tmp_path, one_process):
    """As the page runs it: one process trains the first epoch and writes the
    checkpoint; two processes under torchrun load it, accumulate with no_sync and train
    the second; the result equals one process's two epochs. One launch checks the
    launcher's environment, the resume, accumulation and the equality."""
    args = [SCRIPT, "--accum", "4", "--checkpoint", "acc.pt"]
    first = run(["python"] + args + ["--epochs", "1"], tmp_path)
    assert "1 process(es) x 8 rows x 4 micro-batch(es) = 32 rows" in first.stdout
    assert _weights(tmp_path / "acc.pt")["epoch"] == 1
    second = run([TORCHRUN, "--standalone", "--nproc_per_node", "2"] + args
                 + ["--epochs", "2"], tmp_path)       # finds the checkpoint
    assert re.search(r"rank 0 of 2: LOCAL_RANK 0, .*gloo on cpu", second.stdout)
    assert re.search(r"rank 1 of 2: LOCAL_RANK 1, .*gloo on cpu", second.stdout)
    assert "2 process(es) x 4 rows x 4 micro-batch(es) = 32 rows" in second.stdout
    assert "at epoch 1" in second.stdout and "epoch 0:" not in second.stdout
    _assert_same_model(tmp_path / "acc.pt", one_process, epochs=2)


def test_a_global_batch_that_does_not_split_is_refused_with_a_message(tmp_path):
    p = run(["python", SCRIPT, "--global-batch", "30", "--accum", "4"], tmp_path,
            check=False)
    assert p.returncode != 0
    assert "does not split into 1 processes x 4 micro-batches" in p.stderr
    assert not (tmp_path / "runs").exists()


def test_two_nodes_of_one_process_each_through_torchrun_flags(tmp_path, one_process):
    port = str(free_port())
    nodes = [start([TORCHRUN, "--nnodes", "2", "--node_rank", str(n), "--nproc_per_node",
                    "1", "--master_addr", "127.0.0.1", "--master_port", port, SCRIPT,
                    "--checkpoint", "nodes.pt"], tmp_path) for n in (0, 1)]
    out0, out1 = finish(nodes)
    assert "rank 0 of 2: LOCAL_RANK 0" in out0 and "rank 1 of 2: LOCAL_RANK 0" in out1
    _assert_same_model(tmp_path / "nodes.pt", one_process, epochs=2)


def test_the_slurm_batch_script_runs_one_torchrun_per_node(tmp_path, one_process):
    fake = fake_slurm(tmp_path)
    ckpt = tmp_path / "slurm.pt"
    p = run(["bash", str(SCRIPTS / "ddp_torch.sbatch")], SCRIPTS, check=False,
            PATH=f"{fake}:{BIN}:/usr/bin:/bin", LOGDIR=str(tmp_path), SLURM_NNODES="2",
            SLURM_JOB_NODELIST="node[1-2]", SLURM_GPUS_ON_NODE="1", SLURM_JOB_ID="4242",
            RDZV_PORT=str(free_port()), CHECKPOINT=str(ckpt),
            logs=tuple(tmp_path / f"node{i}.log" for i in (0, 1)))
    logs = [(tmp_path / f"node{i}.log").read_text() for i in (0, 1)]
    assert p.returncode == 0, "\n".join(log[-3000:] for log in logs)
    assert "rank 0 of 2" in "".join(logs) and "rank 1 of 2" in "".join(logs)
    _assert_same_model(ckpt, one_process, epochs=2)


def test_the_slurm_batch_script_trains_when_a_real_slurm_runs_it(tmp_path, one_process, slurm):
    """sbatch on a real one-node Slurm (tests/chapters/scripts/_slurm.py): the script as
    a reader submits it, its node and GPU counts overridden on sbatch's command line (one
    node of this machine, its two generic GPUs: two ranks on gloo); Slurm allocates them,
    sets SLURM_* and runs srun's one torchrun; state, exit code and output are Slurm's."""
    ckpt = tmp_path / "real-slurm.pt"
    job = slurm.sbatch(SCRIPTS / "ddp_torch.sbatch", SCRIPTS,
                       ["--nodes=1", f"--gpus-per-node={GPUS}", f"--cpus-per-task={os.cpu_count()}"],
                       RDZV_PORT=str(free_port()), CHECKPOINT=str(ckpt))
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.output[-4000:] + slurm.logs()
    assert re.search(r"rank 0 of 2: LOCAL_RANK 0", job.output), job.output[-4000:]
    assert re.search(r"rank 1 of 2: LOCAL_RANK 1", job.output), job.output[-4000:]
    _assert_same_model(ckpt, one_process, epochs=2)


def _operator_env(rank: int, replicas: int, nproc: int, port: int) -> dict[str, str]:
    """What the Kubeflow Training Operator sets in PyTorchJob pod `rank` (Master: 0,
    Worker i: i + 1); the pods' service names are this machine here."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "WORLD_SIZE": str(replicas * nproc), "RANK": str(rank),
            "PET_NPROC_PER_NODE": str(nproc), "PET_NODE_RANK": str(rank),
            "PET_NNODES": str(replicas), "PYTHONUNBUFFERED": "0"}


def test_the_pytorchjob_command_trains_with_the_operators_environment(tmp_path,
                                                                       one_process):
    import yaml

    job = yaml.safe_load((SCRIPTS / "ddp_torch_job.yaml").read_text())
    assert job["kind"] == "PyTorchJob"
    specs = job["spec"]["pytorchReplicaSpecs"]
    pods = [spec["template"]["spec"] for kind in ("Master", "Worker")
            for spec in [specs[kind]] for _ in range(spec["replicas"])]
    volume = pods[0]["containers"][0]["volumeMounts"][0]["mountPath"]
    port = free_port()
    procs = []
    for rank, pod in enumerate(pods):
        container = pod["containers"][0]
        assert container["name"] == "pytorch"
        # One process per pod: this machine has no GPUs for the manifest's nprocPerNode.
        env = _operator_env(rank, len(pods), 1, port)
        cmd = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], part)  # as Kubernetes
               .replace(volume, str(tmp_path)) for part in container["command"]]
        procs.append(start(cmd, SCRIPTS, **env))
    finish(procs)
    ckpt = Path(_checkpoint_arg(pods[0]["containers"][0]["command"]).replace(
        volume, str(tmp_path)))
    _assert_same_model(ckpt, one_process, epochs=2)


def _checkpoint_arg(command: list[str]) -> str:
    return command[command.index("--checkpoint") + 1]


@pytest.fixture(scope="module")
def comm(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("comm")
    run([TORCHRUN, "--standalone", "--nproc_per_node", "2",
         str(SCRIPTS / "ddp_comm_torch.py"), "--out", "comm.json"], out)
    return json.loads((out / "comm.json").read_text())


def test_no_sync_cuts_the_all_reduces_by_the_accumulation_factor(comm):
    plain, naive, synced, _ = comm["accumulation"]
    assert plain["steps"] == naive["steps"] == synced["steps"] == 16
    assert naive["backwards"] == synced["backwards"] == 4 * plain["backwards"]
    assert naive["allreduces"] == naive["backwards"]       # one bucket per backward
    assert synced["allreduces"] * synced["accum"] == naive["allreduces"]
    assert synced["bytes"] * synced["accum"] == naive["bytes"]
    assert naive["max_diff"] < 1e-5 and synced["max_diff"] < 1e-5  # the same training


def test_the_compression_hook_halves_the_bytes_and_changes_the_result_a_little(comm):
    plain, compressed = comm["accumulation"][0], comm["accumulation"][3]
    assert (plain["dtype"], compressed["dtype"]) == ("float32", "float16")
    assert compressed["allreduces"] == plain["allreduces"]
    assert 2 * compressed["bytes"] == plain["bytes"]
    assert 1e-6 < compressed["max_diff"] < 1e-2


def test_a_parameter_is_never_split_across_buckets(comm):
    default, half, four = comm["buckets"]
    sizes = default["sizes"]
    assert all(len(b["first_step"]) == 1 for b in comm["buckets"])  # before the rebuild
    assert default["later"] == half["later"] == [["2.bias", "2.weight"],
                                                  ["0.bias", "0.weight"]]
    assert all(sum(sizes[n] for n in bucket) > 2**20 // 2 for bucket in half["later"])
    assert len(four["later"]) == 1
    for b in comm["buckets"]:
        packed = [n for bucket in b["later"] for n in bucket]
        assert sorted(packed) == sorted(sizes)                   # each exactly once


def test_buffers_are_broadcast_in_every_forward_unless_turned_off(comm):
    on, off = comm["broadcasts"]
    assert on["value"] is True and off["value"] is False
    assert on["broadcasts"] >= on["forwards"] and off["broadcasts"] == 0


def test_a_step_that_leaves_parameters_unused_needs_find_unused_parameters(comm):
    found, not_found = comm["unused"]
    assert found == {"find_unused_parameters": True, "error": None}
    assert "find_unused_parameters=True" in not_found["error"]
    assert not_found["error"].endswith(".")   # whole sentences (a line ended "and by")


def test_the_page_shows_in_full_every_script_it_launches():
    from grader.lab.core.gpucells import parse_page

    page = SCRIPTS.parent / "data_parallel.md"
    code = "\n".join(cell.source for cell in parse_page(page))
    launched = set(re.findall(r"scripts/(\w+\.py)", code))
    shown = set(re.findall(r"```\{literalinclude\} scripts/(\S+)", page.read_text()))
    assert {"ddp_torch.py", "ddp_comm_torch.py", "ddp_paddle.py",
            "ddp_comm_paddle.py"} <= launched
    assert launched <= shown
    assert {"ddp_torch.sbatch", "ddp_torch_job.yaml", "ddp_paddle.sbatch",
            "ddp_paddle_job.yaml"} <= shown
    assert all((SCRIPTS / name).exists() for name in shown)
