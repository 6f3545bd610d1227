"""Splitting a lab over machines: switches balanced, rail planes kept whole where that balances,
every host with most of its leaves; and the per-machine estimates add up to the whole lab."""

from collections import Counter

import pytest
from test_model import fabric_of

from twin.lab import idle
from twin.model.partition import crossing_links, split


@pytest.mark.parametrize("lab", ["mini", "rail4", "rail8", "pod64", "pod128"])
@pytest.mark.parametrize("machines", [1, 2, 3, 4])
def test_every_node_on_one_machine_and_switches_balanced(lab, machines):
    fabric = fabric_of(lab)
    where = split(fabric, machines)
    assert set(where) == set(fabric.nodes) and set(where.values()) <= set(range(machines))
    load = Counter(where[n.name] for n in fabric.switches)
    share = len(fabric.switches) / machines
    assert max(load.values()) <= share + max(1.0, 0.1 * share), load
    for host in fabric.hosts:  # a host sits with the most of its leaves any machine has
        leaves = Counter(where[link.peer(host.name).node] for link in fabric.links_of(host.name))
        assert leaves[where[host.name]] == max(leaves.values())


@pytest.mark.parametrize("lab, machines", [("rail8", 2), ("rail8", 4), ("pod64", 2), ("pod64", 4),
                                           ("pod128", 2), ("pod128", 4), ("pod128", 8)])
def test_rail_planes_stay_whole_when_they_divide_evenly(lab, machines):
    fabric = fabric_of(lab)
    where = split(fabric, machines)
    for rail in range(1, fabric.rails + 1):
        assert len({where[n.name] for n in fabric.switches if n.rail == rail}) == 1
    leaf_spine = [link for link in crossing_links(fabric, where)
                  if {fabric.nodes[link.a.node].role, fabric.nodes[link.b.node].role} == {"leaf", "spine"}]
    assert leaf_spine == []  # only spine-superspine and host links cross machines


def test_estimates_add_up_to_the_lab():
    fabric = fabric_of("pod128")
    one = idle.machine_estimates(fabric, split(fabric, 1), 1)[0]
    four = idle.machine_estimates(fabric, split(fabric, 4), 4)
    assert one.bfd_sessions == idle.bfd_sessions(fabric) == sum(e.bfd_sessions for e in four)
    assert sum(e.switches for e in four) == len(fabric.switches) and sum(e.hosts for e in four) == len(fabric.hosts)
    assert one.vxlan_links == 0 and one.local_links == len(fabric.links)
    assert sum(e.local_links for e in four) + sum(e.vxlan_links for e in four) // 2 == len(fabric.links)
    assert sum(e.cores for e in four) == pytest.approx(one.cores, abs=0.05)


def test_bfd_cost_and_the_interval_that_fits():
    fabric = fabric_of("pod64")
    assert idle.bfd_sessions(fabric) == 2 * (640 - 128)
    cost = idle.bfd_cores(fabric, 300)
    assert cost == pytest.approx(1024 * (1000 / 300) / idle.MEAN_JITTER * idle.bfd_cpu_s_per_packet(fabric))
    assert fabric.bfd_offload and idle.bfd_cpu_s_per_packet(fabric) == idle.DATA_PLANE_CPU_S_PER_PACKET
    interval = idle.bfd_interval_that_fits(fabric, 0.1)
    assert interval > 100 and idle.bfd_cores(fabric, interval) <= 0.1 < idle.bfd_cores(fabric, interval - 100)
