"""Probe plan: ports per pair, pairs per mode, and that the mesh can reach every link."""

import itertools
import random

import pytest

from twin.lab import runtime
from twin.model.build import build_fabric
from twin.probes.mesh import address_links
from twin.probes.plan import _all_paths_probability, equal_cost_paths, plan, ports_needed, probe_load
from twin.spec.labfile import load_lab

from test_model import fabric_of


def test_probability_matches_enumeration():
    # 3 paths, 5 ports: count the assignments that hit every path
    hits = sum(len(set(a)) == 3 for a in itertools.product(range(3), repeat=5))
    assert _all_paths_probability(3, 5) == pytest.approx(hits / 3 ** 5)


@pytest.mark.parametrize("paths, ports", [(1, 1), (2, 8), (4, 21), (8, 51)])
def test_ports_needed(paths, ports):
    assert ports_needed(paths) == ports
    assert _all_paths_probability(paths, ports) >= 0.99 > _all_paths_probability(paths, ports - 1)


def test_ports_needed_holds_empirically():
    rng = random.Random(7)
    trials = 4000
    covered = sum(len({rng.randrange(8) for _ in range(ports_needed(8))}) == 8 for _ in range(trials))
    assert covered / trials >= 0.98


ONE_GROUP = """\
name: onegroup
fabric: {tiers: 2, groups: 1, rails: 2, hosts_per_group: 3, spines_per_plane: 2}
links: {rate: 100mbit, mtu: 1500}
routing: {bfd: {interval_ms: 300, multiplier: 3}, ecmp_hash: l4}
runtime: netns
"""


@pytest.mark.parametrize("lab", ["mini", "rail4", "rail8", "onegroup"])
def test_cover_mode_can_reach_every_link(lab, tmp_path):
    if lab == "onegroup":  # every host under the same leaves: only cross-rail pairs reach the spines
        (tmp_path / "onegroup.yaml").write_text(ONE_GROUP)
        fabric = build_fabric(load_lab(tmp_path / "onegroup.yaml", runtime.names()))
    else:
        fabric = fabric_of(lab)
    reachable = set()
    for p in plan(fabric, "cover"):
        for switches in equal_cost_paths(fabric, p.src, p.dst):
            hops = [p.src.host, *switches, p.dst.host]
            reachable |= {fabric.find_link(a, b).name for a, b in zip(hops, hops[1:])}
    assert reachable == {link.name for link in fabric.links}


def test_modes_and_load():
    fabric = fabric_of("rail4")
    rail, cover, full = (plan(fabric, mode) for mode in ("rail", "cover", "full"))
    assert {(p.src.rail, p.dst.rail) for p in rail} == {(r, r) for r in range(1, 5)}
    assert len(rail) < len(cover) < len(full) == 16 * 12
    load = probe_load(cover, 100)
    # per NIC: 1 same-leaf path + 2 hosts x 2 spine paths + 1 cross-rail pair x 8 paths = 13
    assert load == {"probes_per_s": 16 * 13 * 10, "max_per_nic": 130.0, "discovery_packets": load["discovery_packets"]}
    assert plan(fabric, "cover", seed=3) != plan(fabric, "cover", seed=4)
    assert plan(fabric, "cover", seed=3) == plan(fabric, "cover", seed=3)


def test_every_switch_address_names_its_link():
    fabric = fabric_of("rail4")
    table = address_links(fabric)
    switch_ends = [(link, end) for link in fabric.links for end in (link.a, link.b)
                   if fabric.nodes[end.node].is_switch]
    assert len(table) == len(switch_ends)
    for link, end in switch_ends:
        assert table[str(end.address.ip)] == link.name
