"""Student ranks behind trusted relays (grader.ranks.relay): the relays perform and count every
message; what a rank's own process does changes no count; every wait is bounded."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from grader.ranks import relay
from grader.lab.core.launch import RankFailed, RankTimeout

pytestmark = pytest.mark.slow

PREAMBLE = "import torch\nimport torch.distributed as dist\n"


def program(body: str) -> dict:
    src = PREAMBLE + "def fn(x, rank, world_size):\n" + "".join(f"    {l}\n" for l in body.splitlines())
    return {"module": "relay_test_fn", "name": "fn", "source": src}


def inputs(world: int = 2, n: int = 4) -> list:
    return [np.full(n, r + 1, np.float32) for r in range(world)]


def test_the_relays_count_what_was_sent_and_the_rank_gets_the_values():
    logs = relay.run_ranks(program("""
buf = torch.zeros_like(x)
req = dist.isend(x.clone(), (rank + 1) % world_size)
dist.recv(buf, (rank - 1) % world_size)
req.wait()
assert dist.get_rank() == rank and dist.get_world_size() == world_size
return x + buf"""), inputs(), timeout=60)
    for rank, log in enumerate(logs):
        assert log["sent_to"] == [(rank + 1) % 2] and log["sent_elems"] == 4 and log["recvs"] == 1
        assert log["collectives"] == [] and log["got"].tolist() == [3.0] * 4


def test_a_rank_cannot_forge_its_counts_from_its_own_process():
    """The real collective under a name no stand-in covers has no process group to run on,
    and the counts live in the relay: the rank's frames hold none."""
    logs = relay.run_ranks(program("""
import sys
import torch.distributed.distributed_c10d as c10d
frames, f = [], sys._getframe(1)
while f is not None:
    frames.append(f.f_locals)
    f = f.f_back
assert not any("log" in names or "sent_to" in names for names in frames), "found a log"
c10d.all_reduce(x)"""), inputs(), timeout=60)
    assert all("not been initialized" in log["error"] for log in logs), logs
    assert all(log["sent_to"] == [] and log["recvs"] == 0 for log in logs)


def test_collectives_are_recorded_and_peers_checked():
    logs = relay.run_ranks(program("""
dist.all_reduce(x)
try:
    dist.send(x, rank)
except ValueError as e:
    assert "another rank" in str(e)
else:
    raise AssertionError("sent to itself")
return x"""), inputs(), timeout=60)
    assert [log["collectives"] for log in logs] == [["all_reduce"]] * 2
    assert all(log["got"].tolist() == [3.0] * 4 for log in logs)


def test_an_endless_loop_ends_the_run_as_a_rank_timeout():
    with pytest.raises(RankTimeout) as err:
        relay.run_ranks(program("while True:\n    pass"), inputs(), timeout=3)
    assert err.value.ranks == [0, 1]


def test_a_deadlock_of_blocking_sends_ends_as_a_rank_timeout():
    with pytest.raises(RankTimeout):
        relay.run_ranks(program("dist.send(torch.zeros(1000), (rank + 1) % world_size)\n"
                                "dist.recv(x, (rank - 1) % world_size)"), inputs(), timeout=3)


def test_a_rank_process_that_cannot_start_fails_the_run_at_once(monkeypatch):
    monkeypatch.setenv(relay.ISOLATION_ENV, json.dumps(["false"]))
    t0 = time.monotonic()
    with pytest.raises(RankFailed, match="ended before it was ready"):
        relay.run_ranks(program("return x"), inputs(), timeout=60)
    assert time.monotonic() - t0 < relay.STARTUP_S
