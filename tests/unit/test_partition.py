"""Splitting a lab over machines: switches balanced, rail planes kept whole where that balances,
every host with most of its leaves; and the per-machine estimates add up to the whole lab."""

import json
from collections import Counter

import pytest
from test_model import fabric_of

from twin.cli.lab import machine_addresses
from twin.errors import TwinError
from twin.lab import idle
from twin.lab.kernel.vxlan import seam_ends
from twin.model import serialize
from twin.model.export import topology
from twin.model.partition import VXLAN_PORT, crossing_links, share, split


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


ADDRESSES = ["10.9.0.1", "10.9.0.2", "10.9.0.3", "10.9.0.4"]


@pytest.mark.parametrize("lab", ["mini", "rail4", "pod64"])
@pytest.mark.parametrize("machines", [2, 4])
def test_a_share_wires_what_the_export_writes_for_its_machine(lab, machines):
    """`twin lab up --machines N --machine K` and `twin export --hosts N` make the same wiring: the
    same nodes, the same veths, the same VXLAN ends (node, port, remote address, VNI, UDP port)."""
    fabric = fabric_of(lab)
    where = split(fabric, machines)
    for machine in range(1, machines + 1):
        part = share(fabric, machines, machine, ADDRESSES[:machines])
        document = topology(fabric, where, machine - 1, ADDRESSES[:machines])
        links = document["topology"]["links"]
        assert {n.name for n in part.local_nodes} == set(document["topology"]["nodes"])
        assert sorted(link["endpoints"] for link in links if "endpoints" in link) == sorted(
            [f"{link.a.node}:{link.a.ifname}", f"{link.b.node}:{link.b.ifname}"] for link in part.local_links)
        exported = sorted((link["endpoint"]["node"], link["endpoint"]["interface"], link["remote"], link["vni"],
                           link["dst-port"]) for link in links if link.get("type") == "vxlan-stitch")
        tunnels = sorted((end.end.node, end.end.ifname, part.machine_addresses[end.remote_machine], end.vni,
                          VXLAN_PORT) for end in seam_ends(part))
        assert exported == tunnels and len(tunnels) == len(part.seam_links)


def test_the_two_ends_of_a_crossing_link_share_its_vni():
    fabric = fabric_of("rail8")
    parts = [share(fabric, 2, machine, ADDRESSES[:2]) for machine in (1, 2)]
    ends = {machine: {end.vni: end for end in seam_ends(part)} for machine, part in enumerate(parts)}
    assert ends[0].keys() == ends[1].keys() and ends[0]
    for vni, end in ends[0].items():
        other = ends[1][vni]
        assert end.link == other.link and end.end != other.end
        assert (end.remote_machine, other.remote_machine) == (1, 0)


def test_a_share_is_a_lab_of_its_own_and_lossy():
    """Named <lab>-m<K> (the shares of one lab on one box must not collide); PFC and ECN off (the
    controller would see one machine's queues); the placement survives the saved model."""
    part = share(fabric_of("rail4"), 2, 2, ADDRESSES[:2], underlay="m2")
    assert (part.name, part.split_of, part.machine, part.underlay) == ("rail4-m2", "rail4", 2, "m2")
    assert not part.pfc and not part.ecn and not part.queue_programs
    again = serialize.from_dict(json.loads(json.dumps(serialize.to_dict(part))))
    assert {n.name for n in again.local_nodes} == {n.name for n in part.local_nodes}
    assert len(part.local_nodes) < len(part.nodes) and again.machine_addresses == ADDRESSES[:2]
    whole = fabric_of("rail4")
    assert whole.local_nodes == list(whole.nodes.values()) and whole.seam_links == []


@pytest.mark.parametrize("machine, addresses, problem", [
    (3, ADDRESSES[:2], "not one of 1..2"), (1, ADDRESSES[:1], "1 addresses for 2 machines")])
def test_a_share_refuses_a_machine_or_addresses_it_cannot_be(machine, addresses, problem):
    with pytest.raises(ValueError, match=problem):
        share(fabric_of("mini"), 2, machine, addresses)


@pytest.mark.parametrize("given, problem", [
    (("10.0.0.1",), "1 --address for 2 machines"), (("10.0.0.1,10.0.0.1",), "the same --address"),
    (("10.0.0.1,fe80::1",), "not an IPv4 address"), (("10.0.0.1", "x"), "not an IPv4 address")])
def test_machine_addresses_are_checked(given, problem):
    with pytest.raises(TwinError, match=problem):
        machine_addresses(given, 2)
    assert machine_addresses(("10.0.0.1, 10.0.0.2",), 2) == machine_addresses(("10.0.0.1", "10.0.0.2"), 2)
