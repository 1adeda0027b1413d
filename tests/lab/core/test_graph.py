import pytest

from grader.lab.core.graph import concurrent_groups, critical_path, draw, program_graph


def original_program():
    return program_graph([("x", []), ("y", []), ("x*y", ["x", "y"]), ("z", ["x*y"])])


def test_independent_initialisations_share_the_first_group():
    assert concurrent_groups(original_program()) == [["x", "y"], ["x*y"], ["z"]]


def test_a_step_reading_an_unknown_value_is_an_error():
    with pytest.raises(ValueError, match="no earlier step"):
        program_graph([("z", ["x"])])


def test_critical_path_is_the_longest_chain_of_dependent_steps():
    path = critical_path(original_program())
    assert len(path) == 3 and path[1:] == ["x*y", "z"] and path[0] in ("x", "y")


def test_draw_places_every_node():
    import matplotlib
    matplotlib.use("Agg")
    ax = draw(original_program(), title="t")
    assert [len(c.get_offsets()) for c in ax.collections if len(c.get_offsets())] == [4]
