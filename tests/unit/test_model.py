"""The model built from each shipped lab: wiring, addressing, ASNs, interface names, ECMP plan."""

from collections import Counter
from ipaddress import IPv4Network
from pathlib import Path

import pytest

from twin.faults.route_filter import advertised
from twin.lab import runtime
from twin.model.build import build_fabric, rail_network
from twin.model.ecmp import expected_next_hops, leaf_summaries
from twin.model.fabric import IFNAMSIZ
from twin.model.render import render_switch
from twin.spec.labfile import load_lab

LABS = Path(__file__).resolve().parents[2] / "labs"


def fabric_of(name):
    return build_fabric(load_lab(LABS / f"{name}.yaml", runtime.names()))


@pytest.mark.parametrize("name, switches, hosts, links", [
    ("mini", 4, 4, 8),      # 2 spines + 2 leaves, 4 single-NIC hosts
    ("rail4", 18, 4, 48),   # 8 leaves, 8 spines, 2 superspines; 16 host NICs
    ("rail8", 36, 4, 128),  # 16 leaves, 16 spines, 4 superspines; 32 host NICs
    ("pod64", 104, 16, 640),  # 64 leaves, 32 spines, 8 superspines; 128 host NICs
    ("pod128", 208, 32, 2304),  # 128 leaves, 64 spines, 16 superspines; 256 host NICs
    ("aipod", 368, 384, 10240),  # 96 leaves, 256 spines, 16 superspines; 3,072 host NICs
])
def test_counts(name, switches, hosts, links):
    fabric = fabric_of(name)
    assert (len(fabric.switches), len(fabric.hosts), len(fabric.links)) == (switches, hosts, links)


def test_rail_wiring_3_tier():
    fabric = fabric_of("rail4")
    for link in fabric.links:
        a, b = fabric.nodes[link.a.node], fabric.nodes[link.b.node]
        if link.kind == "host":  # NIC r of a host in group g -> leaf (g, r)
            assert (a.role, b.role) == ("leaf", "host")
            assert a.group == b.group and a.rail == link.rail and link.b.ifname == f"nic{a.rail}"
        elif b.role == "leaf":  # leaves only reach the spines of their own rail plane
            assert a.role == "spine" and a.rail == b.rail
        else:
            assert (a.role, b.role) == ("superspine", "spine")
    spines_per_superspine = Counter(link.a.node for link in fabric.links if link.a.node.startswith("superspine"))
    assert set(spines_per_superspine.values()) == {8}


def test_2_tier_full_mesh():
    fabric = fabric_of("mini")
    pairs = {(link.a.node, link.b.node) for link in fabric.links if link.kind == "fabric"}
    assert pairs == {(s, leaf) for s in ("spine-1", "spine-2") for leaf in ("leaf-g1-r1", "leaf-g2-r1")}


@pytest.mark.parametrize("name", ["mini", "rail4", "rail8"])
def test_addressing(name):
    fabric = fabric_of(name)
    addresses = [end.address for link in fabric.links for end in (link.a, link.b)]
    assert len({a.ip for a in addresses}) == len(addresses), "an address is used twice"
    for link in fabric.links:
        assert link.a.address.network == link.b.address.network
        assert link.a.address.network.prefixlen == 31
        if link.kind == "host":
            assert link.b.address.ip in rail_network(link.rail)
    loopbacks = [n.loopback for n in fabric.switches]
    assert len(set(loopbacks)) == len(loopbacks) and None not in loopbacks


def asn_ranks(fabric):
    """Every leaf its own ASN, one ASN per spine plane, one for the superspines, none shared."""
    leaf_asns = [n.asn for n in fabric.by_role("leaf")]
    planes = {s.rail: s.asn for s in fabric.by_role("spine")}
    for spine in fabric.by_role("spine"):
        assert spine.asn == planes[spine.rail]
    tops = {s.asn for s in fabric.by_role("superspine")}
    assert len(tops) <= 1
    everything = leaf_asns + list(planes.values()) + list(tops)
    assert len(set(everything)) == len(everything)


@pytest.mark.parametrize("name", ["mini", "rail4", "rail8", "pod64", "pod128"])
def test_asn_plan(name):
    fabric = fabric_of(name)
    asn_ranks(fabric)
    leaf_asns = [n.asn for n in fabric.by_role("leaf")]
    assert len(set(leaf_asns)) == len(leaf_asns), "every leaf has its own ASN"
    for spine in fabric.by_role("spine"):  # one ASN per spine plane
        same_plane = {s.asn for s in fabric.by_role("spine") if s.rail == spine.rail}
        assert same_plane == {spine.asn}
    assert len({s.asn for s in fabric.by_role("superspine")}) <= 1
    assert all(64512 <= n.asn <= 65534 for n in fabric.switches)


@pytest.mark.parametrize("name", ["mini", "rail4", "rail8"])
def test_interface_names(name):
    fabric = fabric_of(name)
    for node in fabric.nodes:
        names = [link.endpoint(node).ifname for link in fabric.links_of(node)]
        assert len(names) == len(set(names))
        assert all(0 < len(n) <= IFNAMSIZ for n in names)


def test_expected_ecmp_rail4():
    """Hand-computed: a leaf reaches the 14 remote NIC prefixes over its 2 plane spines;
    a spine reaches its own plane's 4 prefixes directly and the other 12 over 2 superspines;
    a superspine reaches every prefix over the 2 spines of that rail plane."""
    expected = expected_next_hops(fabric_of("rail4"))
    assert Counter(expected["leaf-g1-r1"].values()) == {2: 14}
    assert Counter(expected["spine-r1-s1"].values()) == {1: 4, 2: 12}
    assert Counter(expected["superspine-2"].values()) == {2: 16}


def test_expected_ecmp_mini():
    expected = expected_next_hops(fabric_of("mini"))
    assert Counter(expected["leaf-g1-r1"].values()) == {2: 2}
    assert Counter(expected["spine-2"].values()) == {1: 4}


def lab_from_text(tmp_path, text):
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    return load_lab(path, runtime.names())


@pytest.mark.parametrize("plan", ["auto", "4-byte"])
def test_4_byte_private_asns_past_the_2_byte_range(tmp_path, plan):
    """512 leaves do not fit 64512-65534 (leaves would reach the superspines' 65000): RFC 6996's
    4-byte range takes over, automatically or when asked for."""
    lab = lab_from_text(tmp_path, "name: big\nfabric: {tiers: 3, groups: 64, rails: 8, hosts_per_group: 1, "
                                  f"spines_per_plane: 1, superspines: 1}}\nrouting: {{asn_plan: {plan}}}\n")
    fabric = build_fabric(lab)
    asn_ranks(fabric)
    assert all(4_200_000_000 <= n.asn <= 4_294_967_294 for n in fabric.switches)


def test_2_byte_plan_refuses_a_fabric_it_cannot_number(tmp_path):
    with pytest.raises(Exception, match="asn_plan.*512 leaves"):
        lab_from_text(tmp_path, "name: big\nfabric: {tiers: 2, groups: 64, rails: 8, hosts_per_group: 1, "
                                "spines_per_plane: 2}\nrouting: {asn_plan: 2-byte}\n")


def test_small_labs_can_ask_for_4_byte_asns(tmp_path):
    text = (LABS / "mini.yaml").read_text() + "\n"
    text = text.replace("routing:\n", "routing:\n  asn_plan: 4-byte\n") if "routing:" in text else \
        text + "routing: {asn_plan: 4-byte}\n"
    fabric = build_fabric(lab_from_text(tmp_path, text))
    asn_ranks(fabric)
    assert min(n.asn for n in fabric.switches) >= 4_200_000_000


def test_a_switchs_uplinks_are_its_ports_toward_the_tier_above():
    from twin.model.balance import flowlet_gap_s, uplinks
    from twin.model.ports import peer

    fabric = fabric_of("rail4")

    def far_ends(switch):
        ports = uplinks(fabric, switch)
        assert all(p.node == switch for p in ports)
        return [peer(fabric, p).node for p in ports]

    assert far_ends("leaf-g1-r1") == ["spine-r1-s1", "spine-r1-s2"]
    assert far_ends("spine-r1-s1") == ["superspine-1", "superspine-2"]
    assert far_ends("superspine-1") == []
    # lossless: XOFF (100 KB at 200 Mbit/s) drains in 4 ms
    assert flowlet_gap_s(fabric) == pytest.approx(0.004, rel=0.01)


def test_bfd_is_offloaded_on_a_netns_lab_unless_the_file_says_not_and_never_on_docker(tmp_path):
    """routing.bfd.offload (default true) puts BFD in the lab's data plane (lab/bfd/); a docker lab's
    bfdd cannot reach it, also when `--runtime docker` overrides the file."""
    mini = fabric_of("mini")
    assert mini.runtime == "netns" and mini.bfd_offload
    assert not mini.with_runtime("docker").bfd_offload
    text = (LABS / "mini.yaml").read_text().replace("multiplier: 3}", "multiplier: 3, offload: false}")
    (tmp_path / "mini.yaml").write_text(text)
    assert not build_fabric(load_lab(tmp_path / "mini.yaml", runtime.names())).bfd_offload
    (tmp_path / "mini.yaml").write_text(text.replace("offload: false", "offload: true").replace("runtime: netns",
                                                                                               "runtime: docker"))
    assert not build_fabric(load_lab(tmp_path / "mini.yaml", runtime.names())).bfd_offload


def summarized(tmp_path, fabric_line: str):
    return build_fabric(lab_from_text(tmp_path, f"name: sums\nfabric: {fabric_line}\nrouting: {{host_routes: leaf}}\n"))


def test_each_leaf_announces_the_fewest_prefixes_that_cover_exactly_its_hosts(tmp_path):
    """32 hosts in a row: one /26 a leaf. 3 hosts: a /30 and a /31, never a /29 that would claim a
    fourth host's addresses. Every host link's /31 lies in its own leaf's summaries only."""
    big = summarized(tmp_path, "{tiers: 2, groups: 3, rails: 2, hosts_per_group: 32, spines_per_plane: 2}")
    sums = leaf_summaries(big)
    assert all(len(prefixes) == 1 and prefixes[0].prefixlen == 26 for prefixes in sums.values()), sums
    odd = leaf_summaries(summarized(tmp_path, "{tiers: 2, groups: 2, rails: 1, hosts_per_group: 3, "
                                              "spines_per_plane: 2}"))
    assert sorted(prefix.prefixlen for prefix in odd["leaf-g1-r1"]) == [30, 31]
    for link in (each for each in big.links if each.kind == "host"):
        owners = [leaf for leaf, prefixes in sums.items() if any(link.network.subnet_of(p) for p in prefixes)]
        assert owners == [link.a.node]


def test_summaries_are_what_converged_routes_are_expected_toward(tmp_path):
    """Each switch expects its ECMP next hops toward the leaves' summaries, not the hosts' /31s,
    and only a leaf's bgpd config summarizes."""
    fabric = summarized(tmp_path, "{tiers: 2, groups: 2, rails: 1, hosts_per_group: 2, spines_per_plane: 2}")
    expected = expected_next_hops(fabric)
    assert expected["spine-1"] == {IPv4Network("10.1.0.0/30"): 1, IPv4Network("10.1.0.4/30"): 1}
    assert expected["leaf-g1-r1"] == {IPv4Network("10.1.0.4/30"): 2}
    assert "aggregate-address 10.1.0.0/30 summary-only" in render_switch(fabric, fabric.nodes["leaf-g1-r1"])["bgpd"]
    assert "aggregate-address" not in render_switch(fabric, fabric.nodes["spine-1"])["bgpd"]
    assert "aggregate-address" not in render_switch(fabric_of("mini"), fabric_of("mini").nodes["leaf-g1-r1"])["bgpd"]


def test_a_route_filter_for_a_host_takes_the_summary_that_carries_it(tmp_path):
    fabric = summarized(tmp_path, "{tiers: 2, groups: 2, rails: 1, hosts_per_group: 2, spines_per_plane: 2}")
    assert advertised(fabric, ["10.1.0.0/31", "10.1.0.2/31"]) == ["10.1.0.0/30"]
    assert advertised(fabric_of("mini"), ["10.1.0.0/31"]) == ["10.1.0.0/31"]
    assert advertised(fabric, ["10.1.0.0/24"]) == ["10.1.0.0/24"]  # wider than any summary: as given


def test_summarized_host_routes_refuse_dual_port_nics(tmp_path):
    with pytest.raises(Exception, match="host_routes.*reachable through two leaves"):
        lab_from_text(tmp_path, "name: dual\nfabric: {tiers: 2, groups: 2, rails: 1, hosts_per_group: 2, "
                                "spines_per_plane: 2, nic_ports: 2}\nrouting: {host_routes: leaf}\n")
