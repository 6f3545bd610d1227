"""Which NIC pairs the probe mesh measures, with how many source ports, and what that costs.

Pure functions of the model. A pair whose traffic can take P equal-cost paths gets the
smallest number of random source ports K with P(every path hit) >= 0.99; path discovery
then keeps one port per distinct path for continuous probing, so the load is
(distinct paths x 1000 / interval_ms) probes per second, stated before the mesh starts.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

import networkx as nx

from twin.model.fabric import Fabric
from twin.lab.reach import Nic, fabric_nics

PAIR_MODES = ("cover", "rail", "full")
COVERAGE = 0.99
PORT_BASE = 10000  # source ports are drawn from PORT_BASE .. PORT_BASE + PORT_SPAN: below the
PORT_SPAN = 20000  # kernel's ephemeral range, so no other socket of the host holds one


@lru_cache(maxsize=None)
def _all_paths_probability(paths: int, ports: int) -> float:
    """P(K uniformly hashed ports hit all P paths), by inclusion-exclusion."""
    return sum((-1) ** j * math.comb(paths, j) * (1 - j / paths) ** ports for j in range(paths + 1))


def ports_needed(paths: int, coverage: float = COVERAGE) -> int:
    if paths <= 1:
        return 1
    ports = paths
    while _all_paths_probability(paths, ports) < coverage:
        ports += 1
    return ports


def switch_graph(fabric: Fabric) -> nx.Graph:
    """The fabric without hosts: hosts do not forward, so no path transits them."""
    return fabric.graph.subgraph(n for n in fabric.graph if fabric.nodes[n].is_switch)


def equal_cost_paths(fabric: Fabric, src: Nic, dst: Nic) -> list[list[str]]:
    """Switch sequences (leaf .. leaf) of every shortest path between two NICs' leaves."""
    if src.leaf == dst.leaf:
        return [[src.leaf]]
    return [list(p) for p in nx.all_shortest_paths(switch_graph(fabric), src.leaf, dst.leaf)]


@dataclass(frozen=True)
class PairPlan:
    src: Nic
    dst: Nic
    paths: int  # equal-cost paths in the model
    hops: int  # switches on each path
    sports: tuple[int, ...]  # candidate source ports for discovery


def choose_pairs(nics: list[Nic], mode: str, groups: int, rails: int) -> list[tuple[Nic, Nic]]:
    across = [(a, b) for a in nics for b in nics if a.host != b.host]
    if mode == "full":
        return across
    same_rail = [(a, b) for a, b in across if a.rail == b.rail]
    if mode == "rail" or rails == 1:
        return same_rail
    if mode != "cover":
        raise ValueError(f"probe pairs {mode!r}: use {', '.join(PAIR_MODES)}")
    # Same-rail pairs cover host, leaf and spine links of every plane; superspine links carry
    # only cross-rail traffic, so each NIC also probes the next rail on its mirror host in
    # the next group, which crosses both superspine hops. With one group the mirror is the next
    # host of the group: every same-rail pair then stays under one leaf, and only cross-rail
    # pairs (leaf, spine, leaf) reach the spines.
    by_key = {(n.host, n.rail): n for n in nics}
    hosts = sorted({n.host for n in nics}, key=_group_of)
    cross = []
    for nic in nics:
        group, rest = _group_of(nic.host)
        mirror = f"host-g{group % groups + 1}-{rest}" if groups > 1 else hosts[(hosts.index(nic.host) + 1) % len(hosts)]
        peer = by_key.get((mirror, nic.rail % rails + 1))
        if peer is not None and peer.host != nic.host:
            cross.append((nic, peer))
    return same_rail + cross


def fewest_pairs(fabric: Fabric, pairs: str) -> int:
    """A lower bound on the NIC pairs a mesh probes, from the counts alone (each pair is probed at
    least once an interval), so an oversized mesh is refused before its plan is built."""
    hosts, rails = len(fabric.hosts), fabric.rails
    same_rail = rails * hosts * (hosts - 1)
    return {"full": hosts * rails * (hosts - 1) * rails, "rail": same_rail, "cover": same_rail}[pairs]


def _group_of(host: str) -> tuple[int, str]:
    """host-g2-h1 -> (2, 'h1')"""
    _prefix, group, rest = host.split("-", 2)
    return int(group[1:]), rest


def plan(fabric: Fabric, mode: str = "cover", seed: int = 1, coverage: float = COVERAGE) -> list[PairPlan]:
    rng = random.Random(seed)
    plans = []
    for src, dst in choose_pairs(fabric_nics(fabric), mode, fabric.groups, fabric.rails):
        paths = equal_cost_paths(fabric, src, dst)
        count = ports_needed(len(paths), coverage)
        sports = tuple(sorted(rng.sample(range(PORT_BASE, PORT_BASE + PORT_SPAN), count)))
        plans.append(PairPlan(src, dst, len(paths), len(paths[0]), sports))
    return plans


def probe_load(plans: list[PairPlan], interval_ms: int) -> dict:
    """Continuous probes per second (one port per path), total and busiest NIC."""
    per_nic: dict[str, float] = {}
    for p in plans:
        per_nic[p.src.label] = per_nic.get(p.src.label, 0) + p.paths * 1000 / interval_ms
    return {"probes_per_s": round(sum(per_nic.values()), 1),
            "max_per_nic": round(max(per_nic.values(), default=0.0), 1),
            "discovery_packets": sum(len(p.sports) * max(0, p.hops - 1) for p in plans)}
