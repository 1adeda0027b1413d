"""The resource graph: which link a group of ranks runs over, and what the presets say."""
import pytest

from grader.lab import planner as P


def test_groups_inside_a_node_use_its_link_and_groups_across_nodes_the_slower_one():
    c = P.PRESETS["2 x 8 GPUs, Ethernet"]
    assert c.n == 16 and c.per_node == 8
    assert c.link(8, stride=1) is c.intra        # a tp group of 8: one node
    assert c.link(2, stride=8) is c.inter        # its dp partner: the other node
    assert c.link(16) is c.inter
    assert c.inter.bandwidth < c.intra.bandwidth


def test_a_group_across_nodes_without_an_inter_node_link_is_an_error():
    c = P.Cluster("two nodes", 4, 1e12, 1e9, P.Link("a", 1e9, 1e-6), per_node=2)
    with pytest.raises(ValueError, match="inter"):
        c.link(4)


def test_every_preset_states_its_figures_as_assumptions_and_describes_itself():
    for name, c in P.PRESETS.items():
        assert "assumed, not measured" in c.assumptions and "datasheet" in c.assumptions
        assert c.describe().startswith(name) and c.overhead == 0


def test_nvlink_is_faster_than_pcie_in_the_presets():
    nv, pcie = P.PRESETS["8 GPUs NVLink"], P.PRESETS["8 GPUs PCIe"]
    assert nv.bandwidth > pcie.bandwidth and nv.latency < pcie.latency


def test_a_calibrated_cluster_carries_its_measured_overhead():
    c = P.calibrated_cluster(4, 1e10, 1e9, 1e-4, 1e9, overhead=2e-3)
    assert c.overhead == 2e-3 and "overhead 2 ms" in c.describe()
    assert P.with_devices(c, 2).n == 2
