"""Probe plan: ports per pair, pairs per mode, and that the mesh can reach every link."""

import itertools
import random
from collections import Counter

import pytest
from test_model import fabric_of

from twin.lab import runtime
from twin.model.build import build_fabric
from twin.probes.cover import Leaves
from twin.probes.mesh import address_links
from twin.probes.select import routes_of
from twin.probes.selection import _all_paths_probability, cover_plan, fewest_flows, plan, ports_needed, probe_load
from twin.spec.labfile import load_lab


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


def lab_of(tmp_path, tiers, groups, rails, hosts, spines, superspines=0):
    shape = f"tiers: {tiers}, groups: {groups}, rails: {rails}, hosts_per_group: {hosts}, spines_per_plane: {spines}"
    if tiers == 3:
        shape += f", superspines: {superspines}"
    path = tmp_path / f"lab-{tiers}-{groups}-{rails}-{hosts}-{spines}-{superspines}.yaml"
    path.write_text(f"name: gen\nfabric: {{{shape}}}\nlinks: {{rate: 100mbit, mtu: 1500}}\nruntime: netns\n")
    return build_fabric(load_lab(path, runtime.names()))


# Shapes the lab format allows, the awkward ones included: one group (every host under the same
# leaves), one rail, one host per group, 3-tier with one rail (superspines carry no shortest path).
SHAPES = [(2, 1, 2, 3, 2), (2, 2, 1, 1, 3), (2, 3, 2, 2, 4), (3, 2, 2, 1, 2, 1), (3, 3, 1, 2, 3, 2),
          (3, 1, 3, 2, 2, 2), (3, 2, 4, 2, 2, 2)]


def most_paths(fabric) -> Counter:
    """Distinct paths over each link direction among all NIC pairs: the most any plan can probe."""
    leaves, most = Leaves(fabric), Counter()
    for src, dst in itertools.permutations(leaves.nics, 2):
        if src.host != dst.host:
            dag = leaves.to(src, dst)
            most[leaves.ends[src.label][0]] += dag.paths
            for hop, paths, _share in leaves.arrivals(dag, dst):
                most[hop] += paths
            for edge, count in dag.through.items():
                most[leaves.hops[edge]] += count
    return most


@pytest.mark.parametrize("shape", ["mini", "mini-dual", "rail4", "rail8", *SHAPES], ids=str)
def test_cover_crosses_every_reachable_link_direction_k_times(shape, tmp_path):
    fabric = fabric_of(shape) if isinstance(shape, str) else lab_of(tmp_path, *shape)
    for k in (1, 3):
        covering = cover_plan(fabric, k, seed=5)
        selection = covering.expected
        every = {(link.name, end.node) for link in fabric.links for end in (link.a, link.b)}
        assert set(selection.crossings) | set(covering.unreachable) == every
        # Short only where the fabric has fewer than k distinct paths over a link direction (seeded
        # draws: the plan's margin held here).
        assert [hop for hop in selection.short if most_paths(fabric)[hop] >= k] == []
        # Unreachable only where no two leaves route through a link: one leaf, or superspines
        # above a single plane.
        for name, _node in covering.unreachable:
            assert fabric.nodes[name.split(" -- ")[0]].role in ("spine", "superspine")
        assert all(p.src.host != p.dst.host for p in covering.plans)
        assert sum(p.probed for p in covering.plans) == len(selection.flows)
        assert sum(p.routes for p in covering.plans) == len(selection.routes)
        # every leaf's route toward every host is probed from under the leaf, where another host
        # under it can send toward a NIC of that host under another leaf (not delivered by this one:
        # a dual-port NIC's other leaf delivers to it too)
        leaves = Leaves(fabric)
        routes = {(nic.leaf, host) for nic in leaves.nics for host, nics in leaves.of_host.items()
                  if host != nic.host and any(nic.leaf not in other.delivering_leaves for other in nics)}
        assert routes <= set().union(*(routes_of(covering.drawn[flow]) for flow in selection.flows + selection.routes))


def test_cover_probe_load_grows_with_links_not_pairs(tmp_path):
    small, large = fabric_of("rail4"), lab_of(tmp_path, 3, 8, 8, 2, 4, 8)  # 18 and 104 switches
    ratios = []
    for fabric in (small, large):
        covering = cover_plan(fabric, 3)
        ratios.append(len(covering.expected.flows) / covering.hops)
    # One flow crosses 3-7 link directions, so k=3 needs at most about one flow per direction,
    # and balancing (no link on more than half of another's probed paths) a quarter more.
    assert max(ratios) <= 1.25 and max(ratios) <= 1.5 * min(ratios), ratios
    old_rail_pairs = plan(large, "rail")  # what every same-rail pair would cost: quadratic
    assert len(cover_plan(large, 3).expected.flows) < sum(p.probed for p in old_rail_pairs) / 2


def test_modes_and_load():
    fabric = fabric_of("rail4")
    rail, full = plan(fabric, "rail"), plan(fabric, "full")
    assert {(p.src.rail, p.dst.rail) for p in rail} == {(r, r) for r in range(1, 5)}
    assert len(rail) < len(full) == 16 * 12
    load = probe_load(rail, 100)
    # per NIC: 1 same-leaf path + 2 hosts x 2 spine paths = 5 paths
    assert load == {"probes_per_s": 16 * 5 * 10, "max_per_nic": 50.0, "discovery_packets": load["discovery_packets"]}
    cover = cover_plan(fabric, 3, seed=3)
    # a flow testing a route alone is probed every 0.5 s, not every 100 ms
    expected = len(cover.expected.flows) * 10 + len(cover.expected.routes) * 2
    assert probe_load(cover.plans, 100)["probes_per_s"] == expected
    assert plan(fabric, "cover", seed=3) != plan(fabric, "cover", seed=4)
    assert plan(fabric, "cover", seed=3) == plan(fabric, "cover", seed=3)
    assert fewest_flows(fabric, "cover", 3) * 10 <= probe_load(cover.plans, 100)["probes_per_s"]


def test_every_switch_address_names_its_link():
    fabric = fabric_of("rail4")
    table = address_links(fabric)
    switch_ends = [(link, end) for link in fabric.links for end in (link.a, link.b)
                   if fabric.nodes[end.node].is_switch]
    assert len(table) == len(switch_ends)
    for link, end in switch_ends:
        assert table[str(end.address.ip)] == link.name
