"""Which collectives a plan needs, against hand-computed cases."""
import pytest

from grader.lab import planner as P

F = 4  # bytes per float32


def ops(plan):
    return [(c.op, c.where, c.size) for c in plan]


def test_column_then_row_needs_one_forward_all_reduce_of_the_output():
    # Megatron's MLP: the hidden layer stays split; only the output is summed
    plan = P.comm_plan([8, 16, 4], ["col", "row"], batch=32, tp=2)
    assert ops(plan) == [("all_reduce", "fwd after layer 1", 32 * 4 * F)]
    assert P.comm_bytes([(8, 16), (16, 4)], ["col", "row"], 32) == 2 * (1 / 2) * 32 * 4 * F


def test_replicated_layers_need_no_communication_inside_a_tp_group():
    assert P.comm_plan([8, 16, 4], ["R", "R"], batch=32, tp=2) == []


def test_two_column_layers_gather_forward_and_reduce_scatter_backward():
    plan = P.comm_plan([8, 16, 4], ["col", "col"], batch=32, tp=2)
    assert ops(plan) == [("all_gather", "fwd after layer 0", 32 * 16 * F),
                         ("all_gather", "fwd after layer 1", 32 * 4 * F),
                         ("reduce_scatter", "bwd into layer 0", 32 * 16 * F)]


def test_a_row_layer_after_a_replicated_one_sums_forward_and_gathers_backward():
    plan = P.comm_plan([8, 16, 4], ["R", "row"], batch=32, tp=2)
    assert ops(plan) == [("all_reduce", "fwd after layer 1", 32 * 4 * F),
                         ("all_gather", "bwd into layer 0", 32 * 16 * F)]


def test_data_parallel_all_reduces_every_gradient_once_fused_or_per_weight():
    plan = P.comm_plan([8, 16, 4], ["R", "R"], batch=32, tp=1, dp=4)
    assert ops(plan) == [("all_reduce", "dp gradients", (8 * 16 + 16 * 4) * F)]
    assert plan[0].sent == pytest.approx(2 * 3 / 4 * (8 * 16 + 16 * 4) * F)
    assert plan[0].group == "dp"
    split = P.comm_plan([8, 16, 4], ["R", "R"], batch=32, tp=1, dp=4, dp_sync="per_weight")
    assert [c.size for c in split] == [8 * 16 * F, 16 * 4 * F]
    assert sum(c.sent for c in split) == pytest.approx(plan[0].sent)


def test_on_a_2d_mesh_the_activations_are_per_replica_and_the_gradients_per_shard():
    plan = P.comm_plan([8, 16, 4], ["col", "row"], batch=32, tp=2, dp=2)
    assert ops(plan) == [("all_reduce", "fwd after layer 1", 16 * 4 * F),
                         ("all_reduce", "dp gradients", (8 * 16 + 16 * 4) // 2 * F)]
    assert [c.group for c in plan] == ["tp", "dp"]


def test_bad_plans_are_rejected_with_a_message():
    with pytest.raises(ValueError, match="placements"):
        P.comm_plan([8, 16, 4], ["col"], 32)
    with pytest.raises(ValueError, match="unknown placement"):
        P.comm_plan([8, 16, 4], ["col", "diag"], 32)
    with pytest.raises(ValueError, match="does not split"):
        P.comm_plan([8, 16, 4], ["R", "R"], 30, tp=1, dp=4)
    with pytest.raises(ValueError, match="dp_sync"):
        P.comm_plan([8, 16, 4], ["R", "R"], 32, tp=1, dp=2, dp_sync="buckets")
