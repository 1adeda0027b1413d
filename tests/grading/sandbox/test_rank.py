"""Assignment 7's student ranks in the sandbox (grader.grading.sandbox.rank): each runs as the
slot's user, alone (its own folder, no network, nothing of the other ranks), so the only way
between ranks is the relays, which count every message. Needs root and bubblewrap, like
test_sandbox.py (skipped without them, failed when ``CI`` is set)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from grader.grading.sandbox import rank, setup
from grader.grading.config import Limits, SandboxConfig

CFG = SandboxConfig(uid_base=65000)
SLOT = os.getpid() % 500
UID = CFG.uid_base + SLOT


@pytest.fixture(scope="module")
def settings_file(tmp_path_factory) -> str:
    problem = setup.check(CFG)
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    runtime = tmp_path_factory.mktemp("rt")
    setup.prepare(Limits(processes=256), CFG, SLOT, runtime)
    return str(runtime / "sandbox.json")


@pytest.fixture
def isolated(settings_file, monkeypatch):
    for k, v in rank.isolation(settings_file).items():
        monkeypatch.setenv(k, v)


def test_a_rank_binds_only_its_own_folder_and_runs_the_given_command(settings_file):
    settings = json.loads(Path(settings_file).read_text())
    folder = tempfile.mkdtemp(prefix=rank.PREFIX)
    try:
        cmd = rank.command(settings, folder, ["python3", "-c", "pass"])
        assert cmd[-3:] == ["python3", "-c", "pass"] and "ipykernel_launcher" not in cmd
        binds = {cmd[i + 1] for i, a in enumerate(cmd) if a == "--bind"}
        assert binds == {folder}                        # not the slot's socket folder
        assert f"--reuid={UID}" in cmd and "--unshare-net" in cmd
        assert rank._refuse(folder, settings) is None
        assert rank._refuse(str(Path(folder).parent), settings)   # only rank folders
    finally:
        os.rmdir(folder)


def _grade(src: str):
    from tests.checks.notebooks import hidden_checks
    from tests.checks.test_a7_ring_allreduce import _notebook_function

    a7 = hidden_checks("a7_ring_allreduce")

    return a7.check_ring_all_reduce(_notebook_function(src), "torch")


@pytest.mark.slow
def test_each_rank_runs_alone_as_the_slot_user(isolated, tmp_path):
    secret = tmp_path / "gradebook.db"          # a file of the host that no rank may read
    secret.write_text("SECRET")
    results = _grade('''def ring_all_reduce(x, rank, world_size):
    import os, socket
    seen = {"uid": os.getuid(), "tmp": sorted(os.listdir("/tmp")), "cwd": os.getcwd()}
    for path in ("%s",):
        try:
            seen[path] = "read " + open(path).read(10)
        except OSError as e:
            seen[path] = type(e).__name__
    try:
        socket.create_connection(("127.0.0.1", 22), timeout=1)
        seen["net"] = "connected"
    except OSError as e:
        seen["net"] = type(e).__name__
    raise ValueError(repr(seen))
''' % secret)
    said = results[0].message
    seen = eval(said.split("ValueError: ", 1)[1])   # our own repr of plain values
    ranks = [f for f in seen["tmp"] if f.startswith(rank.PREFIX)]
    assert seen["uid"] == UID and ranks == [os.path.basename(seen["cwd"])]   # not the others
    assert seen[str(secret)] == "FileNotFoundError" and seen["net"] != "connected"


FORGER = '''def ring_all_reduce(x, rank, world_size):
    """All-reduce on a process group of its own among the ranks (the real torch.distributed,
    under the name the stand-in does not cover), then fake ring traffic of the right sizes
    through the relays."""
    import datetime
    import torch.distributed.distributed_c10d as c10d
    c10d.init_process_group("gloo", init_method="{init}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=10))
    total = x.clone()
    c10d.all_reduce(total)
    p = world_size
    parts = list(torch.tensor_split(x, p))
    for s in range(2 * (p - 1)):
        i_send, i_recv = (rank - s) % p, (rank - s - 1) % p
        req = dist.isend(parts[i_send].clone(), (rank + 1) % p)
        buf = torch.empty_like(parts[i_recv])
        dist.recv(buf, (rank - 1) % p)
        req.wait()
    return total
'''


@pytest.mark.slow
def test_the_forger_is_real_where_ranks_share_the_machine(tmp_path):
    """Without isolation (a student's own notebook, [sandbox] mode = "none") it forges."""
    results = _grade(FORGER.format(init=f"file://{tmp_path}/store"))
    assert [r.points for r in results] == [3, 1, 2], [r.text() for r in results]


@pytest.mark.slow
def test_the_keyring_answer_is_real_where_ranks_share_a_uid_without_the_filter():
    """The payload of tests/grading/test_identity.py (0 of 6 there, in the sandbox) forges
    points where the ranks are plain processes of one user."""
    from tests.grading.attacks.a7_keyring import RING_KEYRING

    results = _grade(RING_KEYRING)
    # An answer that sends no message scores 0. Through the keyring it forges the point of
    # the result (a7's check now replays the ring from the ranks' inputs, so the parts that
    # judge how the ring ran are no longer forged: 1 of 6, where it was 3 before).
    assert sum(r.points for r in results) >= 1, [r.text() for r in results]


@pytest.mark.slow
def test_isolated_ranks_cannot_reach_each_other_around_the_relays(isolated):
    for init in ("file:///tmp/a7-forge", "tcp://127.0.0.1:29533"):
        results = _grade(FORGER.format(init=init))
        assert sum(r.points for r in results) == 0, [r.text() for r in results]


@pytest.mark.slow
def test_the_reference_solution_scores_full_marks_in_the_sandbox(isolated):
    from tests.checks.notebooks import reference

    results = _grade(reference("a7_ring_allreduce")["ring_all_reduce"])
    assert [r.points for r in results] == [3, 1, 2], [r.text() for r in results]


MEMORY_HOG = '''def ring_all_reduce(x, rank, world_size):
    if rank == 0:      # 2 x 0.8 GB in the memory-backed folders, over the 1.25 GB of the job
        for folder in ("/tmp", "/dev/shm"):
            for i in range(16):
                with open(f"{folder}/fill{i}", "wb") as f:
                    f.write(b"1" * (50 * 2**20))
    return x
'''


@pytest.mark.slow
def test_a_rank_past_memory_gb_is_stopped_by_its_own_control_group(settings_file, monkeypatch,
                                                                   tmp_path):
    """RLIMIT_AS does not see tmpfs: 1.6 GB in /tmp and /dev/shm ran before (a rank held 3.4 GB
    at memory_gb = 1). Now the rank's group stops it at memory_gb; its peak stays under it."""
    import numpy as np

    from grader.grading.sandbox import bounds
    from grader.ranks.relay import run_ranks

    settings = json.loads(Path(settings_file).read_text())
    settings["limits"]["memory_gb"] = 1.25
    small = tmp_path / "sandbox.json"
    small.write_text(json.dumps(settings))
    for k, v in rank.isolation(str(small)).items():
        monkeypatch.setenv(k, v)
    probe = bounds.Box.create(f"course-probe-{os.getpid()}", 2**30, 64)
    if probe is not None:
        probe.remove()
    logs = run_ranks({"module": "a7_memory_hog", "name": "ring_all_reduce", "source": MEMORY_HOG},
                     [np.ones(4, np.float32)] * 2, "torch", timeout=60)
    assert "got" in logs[1], logs[1]
    said = logs[0]["error"]
    line = next((l for l in said.splitlines() if l.startswith("sandbox: ") and l.endswith("}")), said)
    assert "{" in line, said
    end = json.loads(line[line.index("{"):])
    if probe is None:              # no control group on this machine: said so, RLIMIT_AS alone
        assert not end["cgroup"] and "no control group" in said
        return
    limit = int(1.25 * 2**30)
    assert end["cgroup"] and end["cause"] == "memory" and end["signal"] == "SIGKILL", said
    assert end["limit"] == limit and 0 < end["peak"] <= limit, end
    assert "memory limit of 1.25 GB" in line
