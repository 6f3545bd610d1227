"""Dual-port NICs on paper (fabric.nic_ports: 2): the shape, names and addresses docs/formats.md
gives, the hosts' routes over both ports, what BGP must install, the limits' arithmetic, and what
is refused on such a lab."""

from collections import Counter
from ipaddress import IPv4Address, IPv4Network

import pytest
from test_model import LABS, fabric_of

from twin.errors import LabFileError
from twin.lab import runtime
from twin.model.build import build_fabric, rail_network
from twin.model.ecmp import expected_next_hops
from twin.model.export import topology
from twin.model.host_routing import DEFAULT, HostRoute, host_routing, ip_commands
from twin.model.nics import DualPortNicsError, fabric_nics, probe_destination, require_single_port
from twin.model.sysctls import node_sysctls
from twin.spec.labfile import MAX_NODES, RAIL_DUAL_PORT_NICS, fabric_size, load_lab

THREE_TIER = ("name: dual3\nfabric: {tiers: 3, groups: 2, rails: 2, hosts_per_group: 3, spines_per_plane: 2, "
              "superspines: 2, nic_ports: 2}\n")


def lab_from_text(tmp_path, text):
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    return load_lab(path, runtime.names())


@pytest.fixture
def dual3(tmp_path):
    return build_fabric(lab_from_text(tmp_path, THREE_TIER))


def test_every_nic_has_a_port_to_each_of_two_leaves_of_its_rail(dual3):
    leaves = sorted(n.name for n in dual3.by_role("leaf"))
    assert leaves == [f"leaf-g{g}-r{r}-{s}" for g in (1, 2) for r in (1, 2) for s in "ab"]
    ports = Counter((link.b.node, link.rail) for link in dual3.links if link.kind == "host")
    assert set(ports.values()) == {2} and len(ports) == 2 * 3 * 2
    for link in dual3.links:
        if link.kind == "host":
            leaf = dual3.nodes[link.a.node]
            assert link.b.ifname == f"nic{link.rail}{leaf.side}" and link.a.ifname == f"hs-g{leaf.group}h" \
                f"{dual3.nodes[link.b.node].index}"
            assert (leaf.group, leaf.rail) == (dual3.nodes[link.b.node].group, link.rail)
        elif dual3.nodes[link.b.node].role == "leaf":  # both leaves of a rail reach its plane's spines
            assert dual3.nodes[link.a.node].rail == dual3.nodes[link.b.node].rail
    assert len({n.asn for n in dual3.by_role("leaf")}) == 8


def test_the_size_a_check_weighs_is_the_built_fabrics(tmp_path):
    lab = lab_from_text(tmp_path, THREE_TIER)
    fabric, size = build_fabric(lab), fabric_size(lab.spec.fabric)
    assert (size["nodes"], size["links"]) == (len(fabric.nodes), len(fabric.links))
    assert size["switch_links"] == sum(link.kind == "fabric" for link in fabric.links)


def test_a_nics_one_address_is_on_both_ports_each_point_to_point_with_its_leaf(dual3):
    by_nic: dict = {}
    for link in dual3.links:
        if link.kind == "host":
            by_nic.setdefault((link.b.node, link.rail), []).append(link)
    nic_addresses = set()
    leaf_addresses = []
    for (_host, rail), links in by_nic.items():
        address = {link.b.address for link in links}
        assert len(address) == 1
        [nic] = address
        assert nic.network.prefixlen == 32 and nic.ip in IPv4Network(f"10.{rail}.128.0/17")
        nic_addresses.add(nic.ip)
        for link in links:
            assert link.network == nic.network  # the prefix the leaves announce
            assert link.peer_address(link.b.node) == link.a.address.ip
            assert link.peer_address(link.a.node) == nic.ip
            assert link.a.address.ip in IPv4Network(f"10.{rail}.0.0/17")
            leaf_addresses.append(link.a.address.ip)
        a, b = sorted(links, key=lambda link: link.a.node)
        assert int(b.a.address.ip) == int(a.a.address.ip) + 1  # leaf -a even, -b odd of one /31
    assert len(set(leaf_addresses)) == len(leaf_addresses)
    assert not nic_addresses & set(leaf_addresses)
    fabric_links = [link for link in dual3.links if link.kind == "fabric"]
    assert all(link.peer_address(link.a.node) is None for link in fabric_links)


def test_a_single_port_nics_links_are_unchanged_and_not_point_to_point():
    fabric = fabric_of("mini")
    for link in fabric.links:
        assert link.peer_address(link.a.node) is None and link.peer_address(link.b.node) is None
    assert all(nic.device == nic.ifname and nic.interfaces == (nic.ifname,) for nic in fabric_nics(fabric))


def test_the_nic_is_one_nic_with_two_ports_and_its_sockets_bind_to_no_port(dual3):
    nics = fabric_nics(dual3)
    assert len(nics) == 2 * 3 * 2
    nic = next(n for n in nics if n.label == "host-g1-h1:nic2")
    assert nic.interfaces == ("nic2a", "nic2b") and nic.device is None and nic.leaf == "leaf-g1-r2-a"
    assert IPv4Address(nic.address) in rail_network(2)


def test_the_hosts_routes_spread_over_both_ports_of_each_nic(dual3):
    host = dual3.nodes["host-g2-h3"]
    plan = host_routing(dual3, host)
    routes = [item for item in plan if isinstance(item, HostRoute)]
    assert all(len(route.nexthops) == 2 for route in routes)
    rail1 = next(r for r in routes if r.table == 101)
    assert rail1.destination == DEFAULT and [dev for _gw, dev in rail1.nexthops] == ["nic1a", "nic1b"]
    leaves = {str(link.a.address.ip): link.a.node for link in dual3.links_of(host.name)}
    assert [leaves[gw] for gw, _dev in rail1.nexthops] == ["leaf-g2-r1-a", "leaf-g2-r1-b"]
    command = next(c for c in ip_commands(plan) if "table 101" in c and "route" in c)
    (gateway_a, _), (gateway_b, _) = rail1.nexthops
    assert command.endswith(f"nexthop via {gateway_a} dev nic1a nexthop via {gateway_b} dev nic1b")


def test_bgp_installs_both_leaves_of_a_nic_wherever_they_are_equally_near(dual3):
    expected = expected_next_hops(dual3)
    nic = next(n for n in fabric_nics(dual3) if n.label == "host-g1-h1:nic1")
    prefix = IPv4Network(f"{nic.address}/32")
    assert prefix not in expected["leaf-g1-r1-a"]  # its own port: connected
    assert expected["spine-r1-s1"][prefix] == 2  # both of the NIC's leaves
    assert expected["leaf-g2-r1-a"][prefix] == 2  # both spines of the plane
    assert expected["superspine-1"][prefix] == 2  # the plane's two spines


def test_dual_port_hosts_answer_arp_on_the_port_asked_and_single_port_hosts_only_for_their_own_nic(dual3):
    assert node_sysctls(dual3, dual3.nodes["host-g1-h1"])["net.ipv4.conf.all.arp_ignore"] == "0"
    mini = fabric_of("mini")
    assert node_sysctls(mini, mini.nodes["host-g1-h1"])["net.ipv4.conf.all.arp_ignore"] == "1"


def test_an_exported_dual_port_host_gets_its_point_to_point_addresses(dual3):
    commands = topology(dual3)["topology"]["nodes"]["host-g1-h1"]["exec"]
    nic = next(n for n in fabric_nics(dual3) if n.label == "host-g1-h1:nic1")
    addresses = [c for c in commands if c.startswith("ip addr add") and "dev nic1" in c]
    leaf = {link.b.ifname: link.a.address.ip for link in dual3.links_of("host-g1-h1")}
    assert addresses == [f"ip addr add {nic.address}/32 peer {leaf['nic1a']}/32 dev nic1a",
                         f"ip addr add {nic.address}/32 peer {leaf['nic1b']}/32 dev nic1b"]


def test_the_address_plan_and_asns_count_both_leaves(tmp_path):
    # every dual-port NIC a lab can have (its hosts are nodes) has an address in its rail's plan
    assert RAIL_DUAL_PORT_NICS >= MAX_NODES
    # 256 leaves a side: 512 leaves past the 2-byte plan's 488, which the same file with one port fits
    text = "name: asn\nfabric: {tiers: 2, groups: 64, rails: 4, hosts_per_group: 1, spines_per_plane: 1%s}\n" \
           "routing: {asn_plan: 2-byte}\n"
    lab_from_text(tmp_path, text % "")
    with pytest.raises(LabFileError, match="512 leaves"):
        lab_from_text(tmp_path, text % ", nic_ports: 2")


def test_nic_ports_is_one_or_two(tmp_path):
    with pytest.raises(LabFileError, match="nic_ports"):
        lab_from_text(tmp_path, "name: three\nfabric: {tiers: 2, hosts_per_group: 2, spines_per_plane: 1, "
                                "nic_ports: 3}\n")


def test_what_reads_paths_from_host_links_is_refused_with_a_reason(dual3):
    with pytest.raises(DualPortNicsError, match="dual-port") as refused:
        require_single_port(dual3, "dodge")
    assert "nic_ports: 1" in refused.value.hint
    require_single_port(fabric_of("mini"), "dodge")


def test_probes_go_from_each_port_to_each_nic_over_the_paths_to_both_its_leaves(dual3):
    from twin.probes.cover import Leaves
    from twin.probes.selection import cover_plan

    leaves = Leaves(dual3)
    ends = {nic.label: nic for nic in leaves.nics}
    assert len(ends) == 2 * len(fabric_nics(dual3)) and "host-g1-h1:nic1b" in ends
    far = probe_destination(ends["host-g2-h1:nic1a"])
    assert far.label == "host-g2-h1:nic1" and far.delivering_leaves == ("leaf-g2-r1-a", "leaf-g2-r1-b")
    # up to one of the rail plane's 2 spines, down to one of the NIC's 2 leaves
    dag = leaves.to(ends["host-g1-h1:nic1a"], far)
    assert (dag.paths, dag.hops) == (4, 3)
    assert {leaf: share for leaf, (_paths, share) in dag.arrive.items()} == {"leaf-g2-r1-a": 0.5, "leaf-g2-r1-b": 0.5}
    near = leaves.to(ends["host-g1-h1:nic1b"], probe_destination(ends["host-g1-h2:nic1a"]))
    assert (near.paths, near.hops, list(near.arrive)) == (1, 1, ["leaf-g1-r1-b"])  # its own leaf delivers
    plan = cover_plan(dual3, k=3)
    assert {p.src.ifname for p in plan.plans} == {"nic1a", "nic1b", "nic2a", "nic2b"}
    assert {p.dst.ifname for p in plan.plans} == {"nic1", "nic2"}
    crossings = Counter(hop for flow in plan.expected.flows for hop in set(plan.drawn[flow]))
    every = set(leaves.hops.values()) | {hop for pair in leaves.ends.values() for hop in pair}
    assert not plan.unreachable and min(crossings[hop] for hop in every) >= 3


def test_a_probe_to_a_dual_port_nic_names_the_link_its_trace_arrived_on(dual3):
    from twin.probes.mesh import PathNames, address_links

    names = PathNames(dual3)
    answer = {names.entered[address]: address for address in address_links(dual3)
              if names.entered[address] == "leaf-g2-r1-b"}
    spine = {names.entered[address]: address for address in address_links(dual3)
             if names.entered[address] == "spine-r1-s1" and "leaf-g1-r1-a" in names.addresses[address]}
    path = names.path("host-g1-h1:nic1a", [spine["spine-r1-s1"], answer["leaf-g2-r1-b"]],
                      "host-g2-h1:nic1")
    assert path[0] == "leaf-g1-r1-a -- host-g1-h1" and path[-1] == "leaf-g2-r1-b -- host-g2-h1"
    unanswered = names.path("host-g1-h1:nic1a", [spine["spine-r1-s1"], None], "host-g2-h1:nic1")
    assert unanswered[-1] is None  # the last spine hashed to either leaf
    assert names.path("host-g1-h1:nic1b", [], "host-g1-h2:nic1") == \
        ("leaf-g1-r1-b -- host-g1-h1", "leaf-g1-r1-b -- host-g1-h2")  # delivered by the sender's own leaf


def test_the_shipped_dual_port_lab_builds():
    fabric = fabric_of("mini-dual")
    assert fabric.nic_ports == 2 and len(fabric.by_role("leaf")) == 4 and len(fabric_nics(fabric)) == 4
    assert (LABS / "mini-dual.yaml").read_text().count("nic_ports: 2") == 1


def test_a_slow_nic_is_both_of_its_ports_and_a_port_can_be_slow_alone(dual3):
    from twin.faults.slow_node import SlowNodeParams, _ends
    from twin.model.targets import TargetError

    def ports(nic):
        params = SlowNodeParams(node="host-g1-h1", nic=nic, rate_pct=20)
        return sorted(end.ifname for end in _ends(dual3, params) if end.node == "host-g1-h1")
    assert ports("nic1") == ["nic1a", "nic1b"] and ports("nic2b") == ["nic2b"]
    assert ports(None) == ["nic1a", "nic1b", "nic2a", "nic2b"]
    with pytest.raises(TargetError) as refused:
        ports("nic3")
    assert refused.value.hint == "NICs: nic1, nic1a, nic1b, nic2, nic2a, nic2b"


DUAL_PLANE = THREE_TIER.replace("nic_ports: 2}", "nic_ports: 2, dual_plane: true}")


def test_a_dual_plane_fabric_gives_each_side_spines_of_its_own(tmp_path):
    lab = lab_from_text(tmp_path, DUAL_PLANE)
    fabric, size = build_fabric(lab), fabric_size(lab.spec.fabric)
    assert (size["nodes"], size["links"]) == (len(fabric.nodes), len(fabric.links))
    spines = sorted(n.name for n in fabric.by_role("spine"))
    assert spines == [f"spine-r{r}-s{s}-{side}" for r in (1, 2) for s in (1, 2) for side in "ab"]
    for link in fabric.links:
        ends = [fabric.nodes[link.a.node], fabric.nodes[link.b.node]]
        if {n.role for n in ends} == {"spine", "leaf"}:
            assert ends[0].side == ends[1].side and ends[0].rail == ends[1].rail
    # a spine routes a NIC's address toward its own side's leaf only; a leaf over its side's spines
    expected = expected_next_hops(fabric)
    nic = next(n for n in fabric_nics(fabric) if n.label == "host-g2-h1:nic1")
    prefix = IPv4Network(f"{nic.address}/32")
    assert expected["spine-r1-s1-a"][prefix] == 1 and expected["leaf-g1-r1-b"][prefix] == 2
    assert expected["superspine-1"][prefix] == 4  # either side's two spines of the rail


def test_a_dual_plane_fabric_needs_dual_port_nics(tmp_path):
    with pytest.raises(LabFileError, match="dual_plane") as refused:
        lab_from_text(tmp_path, THREE_TIER.replace("nic_ports: 2}", "dual_plane: true}"))
    assert "nic_ports: 2" in str(refused.value.problems[0].hint)


def test_probes_cover_a_dual_plane_fabric(tmp_path):
    from twin.probes.selection import cover_plan

    fabric = build_fabric(lab_from_text(tmp_path, DUAL_PLANE))
    plan = cover_plan(fabric, k=3)
    crossings = Counter(hop for flow in plan.expected.flows for hop in set(plan.drawn[flow]))
    every = {(link.name, end.node) for link in fabric.links for end in (link.a, link.b)}
    assert not plan.unreachable and min(crossings[hop] for hop in every) >= 3


@pytest.mark.parametrize("text", [THREE_TIER, DUAL_PLANE, DUAL_PLANE.replace("tiers: 3", "tiers: 2")
                                  .replace(", superspines: 2", "")], ids=["dual3", "dual-plane", "dual-plane-2tier"])
def test_the_most_paths_bound_is_the_most_a_pair_of_nics_has(tmp_path, text):
    """plan_size_bound's factor: on a dual plane a NIC's port reaches half the spines, and one leaf."""
    from twin.probes.cover import Leaves
    from twin.probes.selection import most_paths

    fabric = build_fabric(lab_from_text(tmp_path, text))
    leaves = Leaves(fabric)
    most = max(leaves.to(src, probe_destination(dst)).paths for src in leaves.nics for dst in leaves.nics
               if src.host != dst.host)
    assert most_paths(fabric) == most
