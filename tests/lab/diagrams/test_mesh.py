"""The mesh diagram puts every rank where init_device_mesh puts it, outlines the groups
the capstone script's functions get, and names the dimensions the script passes them."""
from __future__ import annotations

import ast

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from grader.lab.diagrams import OWNERS, group_of, mesh_diagram, mesh_ranks  # noqa: E402
from grader.lab.diagrams.draw import drawn  # noqa: E402
from grader.lab.planner.composed import DIM_NAMES, Layout  # noqa: E402

from .scripts import function_ast  # noqa: E402


@pytest.fixture
def fake_mesh():
    """``build(layout, rank)``: the script's mesh as ``rank`` sees it, on a fake process
    group (no other process; the mesh's layout and groups are real)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def build(layout: Layout, rank: int):
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", rank=rank, world_size=layout.ranks,
                                store=FakeStore())
        return init_device_mesh("cpu", layout.mesh_shape, mesh_dim_names=DIM_NAMES)

    yield build
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.parametrize("text,rank", [("2x2x2x2", 0), ("2x2x2x2", 13), ("1x2x2x2", 5),
                                       ("2x1x2x2", 6)])
def test_each_rank_and_group_is_the_device_meshs(fake_mesh, text, rank):
    layout = Layout.parse(text)
    mesh = fake_mesh(layout, rank)
    whole = mesh.mesh
    for coords, r in mesh_ranks(layout).items():
        assert int(whole[coords]) == r
    for _, dims in OWNERS:
        assert sorted(mesh[dims].mesh.flatten().tolist()) == group_of(layout, rank, dims)


def test_the_owners_are_what_the_script_passes_each_function():
    train = function_ast("capstone_torch", "train")
    mesh_call = next(n for n in ast.walk(train) if isinstance(n, ast.Call)
                     and getattr(n.func, "id", "") == "init_device_mesh")
    names = next(k.value for k in mesh_call.keywords if k.arg == "mesh_dim_names")
    assert tuple(ast.literal_eval(names)) == DIM_NAMES
    passed = {}
    for call in ast.walk(train):
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") in \
                {name for name, _ in OWNERS}:
            dims = set()
            for sub in ast.walk(call.args[1]):      # mesh["tp"], mesh["a", "b"], ...
                if isinstance(sub, ast.Subscript) and getattr(sub.value, "id", "") == "mesh":
                    key = ast.literal_eval(sub.slice)
                    dims |= {key} if isinstance(key, str) else set(key)
            passed[call.func.id] = dims
    assert passed == {name: set(dims) for name, dims in OWNERS}
    order = [n.func.id for n in ast.walk(train) if isinstance(n, ast.Call)
             and getattr(n.func, "id", "") in passed]
    assert order == [name for name, _ in OWNERS]        # applied in that order


@pytest.mark.parametrize("text", ["2x2x2x2", "1x4x1x1", "1x2x2x2", "2x1x1x2"])
def test_each_drawn_cell_holds_its_rank(text):
    layout = Layout.parse(text)
    fig = mesh_diagram(layout)
    cells = drawn(fig, "mesh-")
    ranks = mesh_ranks(layout)
    assert len(ranks) == layout.ranks
    for (p, r, s, t), rank in ranks.items():
        assert cells[f"mesh-{p}-{r}-{s}-{t}:text"].get_text() == f"rank {rank}"
    words = cells["mesh-owners"].get_text()
    for name, dims in OWNERS:
        members = ", ".join(map(str, group_of(layout, 0, dims)))
        assert f"{name}(model, mesh[" in words and f"ranks {members}" in words


def test_an_unknown_dimension_is_refused():
    with pytest.raises(ValueError, match="dimensions are"):
        group_of(Layout.parse("1x2x1x1"), 0, ("dp",))
