import networkx as nx
import pytest

from grader.lab.graph import (concurrent_groups, critical_path, draw, mlp_step_graph, model_layers,
                              program_graph)


def seed_program():
    return program_graph([("x", []), ("y", []), ("x*y", ["x", "y"]), ("z", ["x*y"])])


def test_independent_initialisations_share_the_first_group():
    assert concurrent_groups(seed_program()) == [["x", "y"], ["x*y"], ["z"]]


def test_a_step_reading_an_unknown_value_is_an_error():
    with pytest.raises(ValueError, match="no earlier step"):
        program_graph([("z", ["x"])])


def _torch_mlp():
    from torch import nn
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_model_layers_lists_parameters_in_order_in_both_frameworks():
    from grader.lab.backends import get_backend
    get_backend("paddle")  # imports paddle quietly (its ccache notice says nothing here)
    from paddle import nn as pnn
    t = model_layers(_torch_mlp())
    p = model_layers(pnn.Sequential(pnn.Linear(4, 8), pnn.ReLU(), pnn.Linear(8, 2)))
    assert [n for n, _ in t] == [n for n, _ in p] == ["0:Linear", "1:ReLU", "2:Linear"]
    assert t[0][1] == p[0][1] == ["0.weight", "0.bias"] and t[1][1] == []


def test_the_two_devices_passes_are_independent_until_the_all_reduce():
    g = mlp_step_graph(model_layers(_torch_mlp()))
    a = [n for n in g if n.endswith("@gpu:0") and n.startswith(("fwd", "bwd", "loss"))]
    b = [n for n in g if n.endswith("@gpu:1") and n.startswith(("fwd", "bwd", "loss"))]
    assert a and b
    assert not any(nx.has_path(g, x, y) or nx.has_path(g, y, x) for x in a for y in b)


def test_last_layer_all_reduce_may_overlap_the_first_layers_backward():
    g = mlp_step_graph(model_layers(_torch_mlp()))
    red = "all-reduce grad 2.weight"
    bwd_first = "bwd 0:Linear @gpu:0"
    assert not nx.has_path(g, red, bwd_first) and not nx.has_path(g, bwd_first, red)
    # ... and every update waits for its own parameter's summed gradient
    assert all(nx.has_path(g, f"all-reduce grad {p}", f"update {p} @gpu:1")
               for p in ("0.weight", "0.bias", "2.weight", "2.bias"))


def test_critical_path_runs_from_the_split_to_an_update():
    path = critical_path(mlp_step_graph(model_layers(_torch_mlp())))
    assert path[0] == "split batch" and path[-1].startswith("update 0.")


def test_draw_places_every_node():
    import matplotlib
    matplotlib.use("Agg")
    ax = draw(seed_program(), title="t")
    assert [len(c.get_offsets()) for c in ax.collections if len(c.get_offsets())] == [4]
