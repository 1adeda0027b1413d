"""The relay's phases (issue 32.5): the relay, not the rank, decides which phase a collective
belongs to. In memory: the relay's request handler with a stand-in process group, and
assignment 10's judge on logs shaped as the relay writes them (no ranks started)."""
from __future__ import annotations

import time
import types

import numpy as np
import pytest

from grader.checks.a10_tensor_parallel import forward_backward
from grader.ranks import relay
from tests.checks.notebooks import hidden_checks


class _Done:
    def wait(self, *args):
        return True


def _dist():
    """A process group of one that performs nothing (the relay's bookkeeping is under test)."""
    return types.SimpleNamespace(all_reduce=lambda *a, **k: _Done(), barrier=lambda *a, **k: _Done())


def _request(log: dict, msg: dict) -> dict:
    import torch

    if "t" in msg and msg["op"] == "collective":
        msg = {**msg, "t": [torch.as_tensor(a) for a in msg["t"]]}
    return relay._perform(_dist(), "torch", 0, 2, msg, log, {}, time.monotonic() + 10)


def _log() -> dict:
    return {"sent_to": [], "sent_elems": 0, "recvs": 0, "collectives": [], "events": [], "phases": []}


def test_each_collective_is_stamped_with_the_results_delivered_before_it():
    log = _log()
    _request(log, {"op": "collective", "name": "all_reduce", "t": [np.ones(3, np.float32)]})
    _request(log, {"op": "deliver", "label": "forward", "got": {"y": np.ones((2, 3), np.float32)}})
    _request(log, {"op": "collective", "name": "all_reduce", "t": [np.zeros(2, np.float32)]})
    assert [e["phase"] for e in log["events"]] == [0, 1]
    assert log["phases"][0]["label"] == "forward" and log["phases"][0]["got"]["y"].shape == (2, 3)


def test_there_is_no_request_that_starts_a_phase_without_delivering_its_results():
    """The old ``mark`` let a rank say "the backward pass begins here" and hide a forward
    all-reduce behind it; the relay knows no such request now."""
    with pytest.raises(ValueError, match="unknown request 'mark'"):
        _request(_log(), {"op": "mark", "label": "backward"})
    with pytest.raises(ValueError, match="named arrays"):
        _request(_log(), {"op": "deliver", "label": "forward", "got": [1, 2]})


def test_a_delivery_the_student_makes_early_only_moves_collectives_into_the_forward_pass():
    """The forward pass ends at the last delivery of y: an all-reduce after the student's own
    early delivery but before the driver's is still the forward pass's, and y is the
    driver's."""
    y_student, y_driver = np.zeros((1, 2)), np.ones((1, 2))
    log = {"phases": [{"label": "forward", "got": {"y": y_student}},
                      {"label": "forward", "got": {"y": y_driver}}],
           "events": [{"name": "all_reduce", "phase": 0}, {"name": "all_reduce", "phase": 1},
                      {"name": "all_reduce", "phase": 2}]}
    fwd, y, bwd = forward_backward(log)
    assert len(fwd) == 2 and len(bwd) == 1 and y is y_driver
    assert forward_backward({"phases": [], "events": [{"name": "all_reduce", "phase": 0}]})[1] is None


# -- assignment 10's judge on logs as the relay writes them ---------------------------------
a10 = hidden_checks("a10_tensor_parallel")


def _mlp_logs(inputs, dense: bool, scale: float = 1.0):
    """Two ranks' logs: Megatron's (each rank's block, g's and f's all-reduces) or a dense MLP
    on every rank with no communication and its weights' gradients times ``scale``."""
    truth = a10._mlp_truth(inputs[0], 2)
    logs = []
    for r in range(2):
        got = {"dx": truth["dx"]}
        for k in ("dw1", "db1", "dw2"):
            got[k] = truth[k] * scale if dense else a10._own_block(truth, k, r)
        events = [] if dense else [
            {"name": "all_reduce", "shapes": [[3, 6]], "t": [truth["partial"][r]], "phase": 0},
            {"name": "all_reduce", "shapes": [[3, 6]], "t": [truth["partial_dx"][r]], "phase": 1}]
        logs.append({"got": got, "events": events, "sent_to": [], "recvs": 0,
                     "phases": [{"label": "forward", "got": {"y": truth["y"]}}]})
    return logs


def test_megatrons_record_scores_full_marks_and_a_dense_model_that_scales_its_gradients_nothing():
    inputs = a10.mlp_case(7)
    right = a10.judge_tp_mlp(_mlp_logs(inputs, dense=False), inputs)
    assert [r.points for r in right] == [3, 1, 2], [r.text() for r in right]
    dense = a10.judge_tp_mlp(_mlp_logs(inputs, dense=True, scale=0.5), inputs)
    assert [r.points for r in dense] == [0, 0, 0], [r.text() for r in dense]
    assert "no collective in the forward pass" in dense[0].message
    assert "not its own block's" in dense[2].message      # the gradients' sum alone would pass


def test_a_backward_pass_with_an_extra_all_reduce_loses_the_backward_points():
    inputs = a10.mlp_case(8)
    logs = _mlp_logs(inputs, dense=False)
    for log in logs:
        log["events"].append({"name": "all_reduce", "shapes": [[3, 6]], "t": [inputs[0]["x"]],
                              "phase": 1})
    got = a10.judge_tp_mlp(logs, inputs)
    assert [r.points for r in got] == [3, 1, 0] and "[2, 2] collectives" in got[2].hint
