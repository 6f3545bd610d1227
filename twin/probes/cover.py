"""Probe planning by link coverage (`pairs: cover`): every directed link crossed by at least k
probed paths, any single lossy link identifiable, at a cost that grows with links, not NIC pairs.

ECMP hashing cannot be predicted from the model (the kernel keys its multipath hash per
namespace), so planning has two stages, as in NetBouncer:
1. here, from the model: NIC pairs and candidate source ports such that every directed link expects
   enough distinct paths among the candidates that fewer than k turn up with probability <= MISS
   (uniform per-hop hashing: n ports on a pair with c paths through a hop that takes a share q
   of its flows hit c(1 - (1 - q/c)^n) of them; the count is about Poisson);
2. select.py, on the paths the agents discover: the fewest candidates that cross every directed
   link k times with distinct path sets; only those are probed continuously.
The same selection run on paths drawn from the model (`simulate`) states the load before the mesh
starts. A directed link is a hop: (link name, the node it leads to).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import networkx as nx

from twin.model.fabric import Fabric
from twin.model.nics import Nic, probe_endpoints

Hop = tuple[str, str]  # (link name, the node it leads to)
MISS = 0.01  # accepted chance that discovery finds fewer than k distinct paths over a link
FILL = 0.999  # ports on a pair stop when they hit this share of its paths (a small pair then finds all)
MAX_PORTS = 32  # candidate source ports per NIC pair; a link needing more gets more pairs
SEARCH = 16  # leaves tried at each end when choosing a pair for a link


@dataclass(frozen=True)
class Dag:
    """The equal-cost paths between two leaves: per directed switch hop, the share of uniformly
    hashed flows that cross it and the number of paths through it."""
    paths: int
    hops: int  # switches on each path
    share: dict[tuple[str, str], float]  # (switch, next switch) -> fraction of flows
    through: dict[tuple[str, str], int]  # (switch, next switch) -> paths crossing it
    nexts: dict[str, list[str]]  # switch -> next switches toward the far leaf
    arrive: dict[str, tuple[int, float]]  # far leaf -> (paths ending there, share of the flows)


class Leaves:
    """Shortest-path structure of the switch graph, computed once per lab."""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        # A copy, not a view: a subgraph view filters every neighbour lookup (10x slower here).
        self.graph = nx.Graph(fabric.switch_graph())
        self.hops, self.ends = switch_hops(fabric), nic_hops(fabric)
        # (leaf, NIC address) -> the hop from the leaf into the NIC: a probe's last
        self.down = {(link.a.node, str(link.b.address.ip)): (link.name, link.b.node)
                     for link in fabric.links if link.kind == "host"}
        self.nics = probe_endpoints(fabric)
        self.under: dict[str, list[Nic]] = {}
        self.of_host: dict[str, list[Nic]] = {}
        for nic in self.nics:
            self.under.setdefault(nic.leaf, []).append(nic)
            self.of_host.setdefault(nic.host, []).append(nic)
        self.leaves = sorted(self.under)
        self._distance: dict[str, dict[str, int]] = {}
        self.dag = lru_cache(maxsize=None)(self._dag)

    def distance(self, node: str) -> dict[str, int]:
        if node not in self._distance:
            self._distance[node] = nx.single_source_shortest_path_length(self.graph, node)
        return self._distance[node]

    def _dag(self, a: str, targets: tuple[str, ...]) -> Dag:
        """The equal-cost paths from leaf `a` to the nearest of `targets` (a NIC's leaves: one, or a
        dual-port NIC's two, which the last spine hashes between)."""
        from_a = self.distance(a)
        length = min(from_a.get(t, math.inf) for t in targets)
        if length == 0:
            return Dag(1, 1, {}, {}, {}, {a: (1, 1.0)})
        ends = [t for t in targets if from_a.get(t) == length]
        to_end = {n: min(self.distance(t).get(n, math.inf) for t in ends) for n in from_a}
        on = sorted((n for n in from_a if from_a[n] + to_end[n] == length), key=from_a.get)
        nexts = {x: sorted(y for y in self.graph[x] if from_a.get(y) == from_a[x] + 1
                           and to_end.get(y) == to_end[x] - 1) for x in on}
        reach, share, ways_in = {a: 1.0}, {}, {a: 1}
        for x in on:
            for y in nexts[x]:
                share[(x, y)] = reach.get(x, 0.0) / len(nexts[x])
                reach[y] = reach.get(y, 0.0) + share[(x, y)]
                ways_in[y] = ways_in.get(y, 0) + ways_in[x]
        ways_out = {}
        for x in reversed(on):
            ways_out[x] = 1 if not nexts[x] else sum(ways_out[y] for y in nexts[x])
        through = {(x, y): ways_in[x] * ways_out[y] for x in on for y in nexts[x]}
        arrive = {t: (ways_in[t], reach[t]) for t in ends}
        return Dag(ways_out[a], length + 1, share, through, nexts, arrive)

    def to(self, src: Nic, dst: Nic) -> Dag:
        """The equal-cost paths of a probe from `src` to `dst`."""
        return self.dag(src.leaf, dst.delivering_leaves)

    def arrivals(self, dag: Dag, dst: Nic) -> list[tuple[Hop, int, float]]:
        """The hops into `dst` a pair's flows end on: (hop, paths through it, share of the flows)."""
        return [(self.down[(leaf, dst.address)], paths, part) for leaf, (paths, part) in dag.arrive.items()]

    def crosses(self, a: str, b: str, u: str, v: str) -> bool:
        """Is the switch hop u -> v on a shortest path from leaf a to leaf b?"""
        from_a, to_b = self.distance(a), self.distance(b)
        return a != b and from_a.get(u, math.inf) + 1 + to_b.get(v, math.inf) == from_a.get(b)


@dataclass
class Candidates:
    """The NIC pairs to discover, with how many candidate ports each, and the expected distinct
    crossings of every hop they give."""
    ports: dict[tuple[Nic, Nic], int]
    expected: Counter
    unreachable: list[Hop]  # directed links no leaf-to-leaf shortest path crosses: never probed
    for_routes: set[tuple[Nic, Nic]]  # pairs added only so that every leaf's route toward every host is tested


def distinct(paths: int, part: float, ports: int) -> float:
    """Expected distinct paths, of `paths` through a hop taking `part` of a pair's flows, that
    `ports` uniformly hashed ports hit."""
    return paths * (1 - (1 - part / paths) ** ports) if paths else 0.0


def poisson_target(k: int, miss: float = MISS) -> float:
    """The smallest mean (in steps of 0.1) whose Poisson count is below k with probability <= miss."""
    mean = float(k)
    while sum(math.exp(-mean) * mean ** i / math.factorial(i) for i in range(k)) > miss:
        mean += 0.1
    return round(mean, 1)


def switch_hops(fabric: Fabric) -> dict[tuple[str, str], Hop]:
    """(switch, next switch) -> hop, for both directions of every switch-to-switch link."""
    hops = {}
    for link in fabric.links:
        if fabric.nodes[link.a.node].is_switch and fabric.nodes[link.b.node].is_switch:
            hops[(link.a.node, link.b.node)] = (link.name, link.b.node)
            hops[(link.b.node, link.a.node)] = (link.name, link.a.node)
    return hops


def nic_hops(fabric: Fabric) -> dict[str, tuple[Hop, Hop]]:
    """NIC label -> (its hop into the fabric, its hop out of it)."""
    return {f"{link.b.node}:{link.b.ifname}": ((link.name, link.a.node), (link.name, link.b.node))
            for link in fabric.links if link.kind == "host"}


def candidates(leaves: Leaves, k: int) -> Candidates:
    """Pairs and port counts such that every directed link expects poisson_target(k) distinct crossings."""
    hops, ends = leaves.hops, leaves.ends
    expected: Counter = Counter()
    ports: dict[tuple[Nic, Nic], int] = {}
    used_src: Counter = Counter()
    used_dst: Counter = Counter()

    def add(src: Nic, dst: Nic, paths: int, part: float, want: float) -> bool:
        """Ports on the pair until the hop (c paths through it, share `part`) expects `want` more
        distinct crossings, or the pair is full; False when it was full already."""
        dag = leaves.to(src, dst)
        before = ports.get((src, dst), 0)
        total = before
        while total < MAX_PORTS and distinct(paths, part, total) < FILL * paths and \
                distinct(paths, part, total) - distinct(paths, part, before) < want:
            total += 1
        if total == before:
            return False
        ports[(src, dst)] = total
        used_src[src.label] += total - before
        used_dst[dst.label] += total - before
        gains = [(ends[src.label][0], dag.paths, 1.0), *leaves.arrivals(dag, dst)]
        gains += [(hops[e], dag.through[e], share) for e, share in dag.share.items()]
        for hop, c, q in gains:
            expected[hop] += distinct(c, q, total) - distinct(c, q, before)
        return True

    def room(src: Nic, dst: Nic, edge: tuple[str, str]) -> bool:
        """Would one more port on this pair add distinct crossings of the switch hop `edge`?"""
        dag, have = leaves.to(src, dst), ports.get((src, dst), 0)
        if edge not in dag.through:  # a dual-port NIC's other leaf: its sender's own, delivering directly
            return False
        return have < MAX_PORTS and distinct(dag.through[edge], dag.share[edge], have) < FILL * dag.through[edge]

    target = poisson_target(k)
    unreachable = []
    for (u, v), hop in sorted(hops.items()):
        while expected[hop] < target:
            pair = _pair_for(leaves, u, v, used_src, used_dst, lambda s, d, u=u, v=v: room(s, d, (u, v)))
            dag = leaves.to(*pair) if pair else None
            if pair is None or not add(*pair, dag.through[(u, v)], dag.share[(u, v)], target - expected[hop]):
                if not expected[hop]:
                    unreachable.append(hop)
                break
    # Host links: every NIC sends and receives on k distinct paths (distinct far ends where its
    # leaf's paths are few).
    turn: Counter = Counter()  # per leaf: the next of its NICs to take as a far end
    for nic in leaves.nics:
        for direction in (0, 1):
            hop = ends[nic.label][direction]
            tries = 0
            while expected[hop] < target and tries < 4 * k:
                tries += 1
                far = _far_end(leaves, nic, direction, ports, turn)
                if far is None:
                    if not expected[hop]:
                        unreachable.append(hop)
                    break
                src, dst = (nic, far) if direction == 0 else (far, nic)
                add(src, dst, leaves.to(src, dst).paths, 1.0, target - expected[hop])
    # A leaf's own pair, one way: a path over that leaf alone. Without one, two leaves (or a leaf
    # and its spine) that every probed path crosses together cannot be told apart when one dies;
    # the selection probes it only where it tells switches apart.
    for leaf in leaves.leaves:
        under = leaves.under[leaf]
        pair = next(((a, b) for a in under for b in under if a.host != b.host), None)
        if pair is not None and pair not in ports:
            add(*pair, 1, 1.0, 1.0)
    # Every leaf's route toward every host: a pair from under the leaf to a NIC of that host under
    # another leaf. A black hole at a leaf (a bad entry toward one host) loses only what the leaf
    # forwards toward that host, and links covered k times each left most such routes unprobed
    # (g12 of the seed-24 draw, 2026-11-30: a black hole on leaf-g3-r4 toward host-g1-h1 lost none
    # of 41,660 probes). Toward a NIC under the leaf itself the route crosses the same paths as the
    # hop into the host, and the link would be named. One port is enough: whichever way ECMP sends
    # it, the flow is forwarded by its own leaf toward that host.
    for_routes = set()
    for leaf, host in _unrouted(leaves, ports):
        src = min((nic for nic in leaves.under[leaf] if nic.host != host),
                  key=lambda nic: (used_src[nic.label], nic.label), default=None)
        far = leaves.distance(leaf)
        dst = min((nic for nic in leaves.of_host[host] if leaf not in nic.delivering_leaves),
                  key=lambda nic: (far.get(nic.leaf, math.inf), nic.label), default=None)
        if src is not None and dst is not None:
            add(src, dst, 1, 1.0, 1.0)
            for_routes.add((src, dst))
    return Candidates(ports, expected, sorted(set(unreachable)), for_routes)


def _unrouted(leaves: Leaves, ports: dict[tuple[Nic, Nic], int]) -> list[tuple[str, str]]:
    """(leaf, host) pairs no candidate pair runs from under the leaf to a NIC of the host under
    another leaf."""
    routed = {(src.leaf, dst.host) for src, dst in ports if src.leaf not in dst.delivering_leaves}
    return [(leaf, host) for leaf in leaves.leaves for host in sorted(leaves.of_host)
            if (leaf, host) not in routed]


def _pair_for(leaves: Leaves, u: str, v: str, used_src: Counter, used_dst: Counter, open_for) -> tuple | None:
    """The least-used NIC pair, still open for more ports on u -> v, whose leaves' shortest paths cross u -> v."""
    def load(leaf: str, used: Counter) -> int:
        return sum(used[n.label] for n in leaves.under[leaf])

    def least(leaf: str, used: Counter) -> list[Nic]:
        return heapq.nsmallest(4, leaves.under[leaf], key=lambda n: (used[n.label], n.label))

    to_u, from_v = leaves.distance(u), leaves.distance(v)
    near_u = sorted(leaves.leaves, key=lambda leaf: (to_u.get(leaf, math.inf), load(leaf, used_src), leaf))[:SEARCH]
    near_v = sorted(leaves.leaves, key=lambda leaf: (from_v.get(leaf, math.inf), load(leaf, used_dst), leaf))[:SEARCH]
    for a in near_u:
        for b in near_v:
            if not leaves.crosses(a, b, u, v):
                continue
            for src in least(a, used_src):
                for dst in least(b, used_dst):
                    if dst.host != src.host and open_for(src, dst):
                        return src, dst
    return None


def _far_end(leaves: Leaves, nic: Nic, direction: int, ports: dict, turn: Counter) -> Nic | None:
    """A NIC on another host to pair with, on the leaf with the most paths from here (the
    least taken among equals), in turn among its NICs, not already paired this way to its fill
    (more ports to the same far end add no distinct path). Linear in leaves and their NICs."""
    def dag(leaf: str) -> Dag:  # the NICs under a leaf are reached through the same leaves
        far = leaves.under[leaf][0]
        return leaves.to(nic, far) if direction == 0 else leaves.to(far, nic)

    for leaf in sorted(leaves.leaves, key=lambda other: (-min(dag(other).paths, MAX_PORTS), turn[other], other)):
        under = leaves.under[leaf]
        for step in range(len(under)):
            far = under[(turn[leaf] + step) % len(under)]
            key = (nic, far) if direction == 0 else (far, nic)
            paths = dag(leaf).paths
            if far.host != nic.host and ports.get(key, 0) < MAX_PORTS and \
                    distinct(paths, 1.0, ports.get(key, 0)) < FILL * paths:
                turn[leaf] += step + 1
                return far
    return None


def draw_paths(leaves: Leaves, src: Nic, dst: Nic, count: int, rng: random.Random) -> list[tuple[Hop, ...]]:
    """Paths of `count` flows hashed uniformly at every hop, as the agents would discover them."""
    hops, ends = leaves.hops, leaves.ends
    dag = leaves.to(src, dst)
    drawn = []
    for _ in range(count):
        path, at = [ends[src.label][0]], src.leaf
        while dag.nexts.get(at):
            nxt = rng.choice(dag.nexts[at])
            path.append(hops[(at, nxt)])
            at = nxt
        path.append(leaves.down[(at, dst.address)])
        drawn.append(tuple(path))
    return drawn
