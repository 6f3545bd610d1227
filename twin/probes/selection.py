"""Which NIC pairs the probe mesh measures, with how many source ports, and what that costs.

Pure functions of the model.
- cover (the default): pairs and candidate ports planned by link coverage (cover.py); after
  discovery only the flows select.py picks are probed, so every directed link is crossed by
  `paths_per_link` paths and the load grows with links, and every leaf's route toward every host
  by one flow (those no link-covering flow tests, sparsely), and the flows over directions fewer probes
  cross more than once an interval (pace.py). The load is stated before the mesh starts by running the
  same selection and pacing on paths drawn from the model.
- rail, full: a pair whose traffic can take P equal-cost paths gets the smallest number of
  random source ports K with P(every path hit) >= 0.99; discovery keeps one port per distinct
  path, so the load is (distinct paths x 1000 / interval_ms) probes per second.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, replace
from functools import cache

import networkx as nx

from twin.model.fabric import Fabric
from twin.model.nics import Nic, probe_destination
from twin.probes.cover import Leaves, candidates, draw_paths
from twin.probes.select import Selection, select

PAIR_MODES = ("cover", "rail", "full")
PATHS_PER_LINK = 3  # cover: probed paths crossing every directed link (tomography needs >= 2 to tell links apart)
COVERAGE = 0.99
# cover: a flow probed only for a leaf's route toward a host is probed once per reporting interval
# (report_ms), not every interval_ms. A black hole loses all a route carries, so a probe per
# interval names it as surely as twenty, and pod128 has 4,096 such routes, 3,168 of them on no
# link-covering flow: probed every interval they would cost 65 % more probes, at the default
# 500 ms 13 %. Less often would not do: a route is weighed only in an interval its flows sent in
# (detect/likelihood.py), and once every 0.5 s at 250 ms reports named a drill's black hole in
# 2.46 s, against 1.45 and 1.54 s (two runs) once an interval.
REPORT_MS = 500  # the probes workload's default reporting interval
PORT_BASE = 10000  # source ports are drawn from PORT_BASE .. PORT_BASE + PORT_SPAN: below the
PORT_SPAN = 20000  # kernel's ephemeral range, so no other socket of the host holds one


@cache
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


def equal_cost_paths(fabric: Fabric, src: Nic, dst: Nic) -> list[list[str]]:
    """Switch sequences (leaf .. leaf) of every shortest path between two NICs' leaves."""
    if src.leaf == dst.leaf:
        return [[src.leaf]]
    return [list(p) for p in nx.all_shortest_paths(fabric.switch_graph(), src.leaf, dst.leaf)]


@dataclass(frozen=True)
class PairPlan:
    src: Nic
    dst: Nic
    paths: int  # equal-cost paths in the model
    hops: int  # switches on each path
    sports: tuple[int, ...]  # candidate source ports for discovery
    probed: int = 0  # flows probed continuously (cover: as the selection on model paths expects)
    routes: int = 0  # cover: flows probed once per reporting interval for a leaf's route toward a host
    routes_only: bool = False  # cover: a pair planned only to test a leaf's route toward a host
    paced: int = 0  # cover: probes an interval over `probed`, on flows paced up (probes/pace.py)


@dataclass
class CoverPlan:
    plans: list[PairPlan]
    expected: Selection  # the selection on paths drawn from the model: what discovery should give
    drawn: dict  # (src, dst, sport) -> hops: the paths drawn from the model for the candidates
    hops: int  # directed links in the fabric
    unreachable: list  # directed links no shortest path between two leaves crosses


def choose_pairs(nics: list[Nic], mode: str) -> list[tuple[Nic, Nic]]:
    """rail: every same-rail NIC pair across hosts; full: every NIC pair across hosts."""
    across = [(a, b) for a in nics for b in nics if a.host != b.host]
    if mode == "full":
        return across
    if mode == "rail":
        return [(a, b) for a, b in across if a.rail == b.rail]
    raise ValueError(f"probe pairs {mode!r}: use {', '.join(PAIR_MODES)}")


def fewest_flows(fabric: Fabric, pairs: str, k: int = PATHS_PER_LINK) -> int:
    """A lower bound on the flows a mesh probes each interval, from the counts alone, so an
    oversized mesh is refused before its plan is built. cover: every NIC's link is crossed by k
    flows each way, and a flow crosses two NIC links."""
    hosts, rails = len(fabric.hosts), fabric.rails
    senders = hosts * rails * fabric.nic_ports  # a dual-port NIC sends from each port, to a NIC's address
    return {"full": senders * (hosts - 1) * rails, "rail": senders * (hosts - 1), "cover": k * senders}[pairs]


# What a plan may hold: the rail and full meshes list every equal-cost path of every pair they
# probe. A full mesh on a lab within one machine's limits (3,000 NICs) has 9 million pairs; its
# plan grew past 400 MB before any rate was weighed. No agent set here sends more than a few
# thousand probes a second anyway (docs/benchmarks.md, probe cover).
MAX_PLANNED_PATHS = 200_000


def most_paths(fabric: Fabric) -> int:
    """The most equal-cost paths between two NICs, from the counts: up, across, down. The last
    spine hashes between a dual-port NIC's leaves, unless the fabric is dual-plane: there a leaf
    reaches its own side's spines only, and a spine its own side's leaf."""
    spines = fabric.by_role("spine")
    sides = 2 if fabric.dual_plane else 1
    last_hop = fabric.nic_ports // sides
    if fabric.tiers == 2:
        return len(spines) // sides * last_hop
    down = len(spines) // fabric.rails  # the far rail's spines, of either side
    return down // sides * len(fabric.by_role("superspine")) * down * last_hop


def plan_size_bound(fabric: Fabric, pairs: str, k: int = PATHS_PER_LINK) -> int:
    """An upper bound on the paths a plan lists (cover: k per NIC link and direction, drawn)."""
    if pairs == "cover":
        return 2 * k * len(fabric.hosts) * fabric.rails * fabric.nic_ports
    return fewest_flows(fabric, pairs, k) * most_paths(fabric)


def plan(fabric: Fabric, mode: str = "cover", seed: int = 1, coverage: float = COVERAGE,
         k: int = PATHS_PER_LINK, floor: int = 0) -> list[PairPlan]:
    if mode == "cover":
        return cover_plan(fabric, k, seed, floor).plans
    rng = random.Random(seed)
    leaves = Leaves(fabric)
    # A dual-port NIC sends from each port and is sent to once, at its address (either port takes it).
    plans = []
    for src, dst in dict.fromkeys((src, probe_destination(dst)) for src, dst in choose_pairs(leaves.nics, mode)):
        dag = leaves.to(src, dst)
        count = ports_needed(dag.paths, coverage)
        sports = tuple(sorted(rng.sample(range(PORT_BASE, PORT_BASE + PORT_SPAN), count)))
        plans.append(PairPlan(src, dst, dag.paths, dag.hops, sports, dag.paths))
    return plans


def cover_plan(fabric: Fabric, k: int = PATHS_PER_LINK, seed: int = 1, floor: int = 0) -> CoverPlan:
    """Candidates by link coverage, and the selection expected on them (paths drawn from the model
    with the same seed, so the figure is reproducible), paced to `floor` probes an interval over
    every direction (probes/pace.py; 0: not paced)."""
    # the pairs for routes draw from their own generator: the links' candidates and their drawn
    # paths are the same with or without them
    rng, routes_rng = random.Random(seed), random.Random(seed + 1)
    leaves = Leaves(fabric)
    found = candidates(leaves, k)
    # Pairs toward either port of a dual-port NIC are one pair, toward the NIC (model/nics.py).
    ports: Counter = Counter()
    links_too: set[tuple[Nic, Nic]] = set()  # pairs planned for links, not only for routes
    for (src, dst), count in found.ports.items():
        ports[(src, probe_destination(dst))] += count
        if (src, dst) not in found.for_routes:
            links_too.add((src, probe_destination(dst)))
    for_routes = set(ports) - links_too
    plans, drawn = [], {}
    for (src, dst), count in sorted(ports.items(), key=lambda item: (item[0][0].label, item[0][1].label)):
        dag = leaves.to(src, dst)
        draw = routes_rng if (src, dst) in for_routes else rng
        sports = tuple(sorted(draw.sample(range(PORT_BASE, PORT_BASE + PORT_SPAN), count)))
        for sport, path in zip(sports, draw_paths(leaves, src, dst, count, draw)):
            drawn[(src.label, dst.label, sport)] = path
        plans.append(PairPlan(src, dst, dag.paths, dag.hops, sports, routes_only=(src, dst) in for_routes))
    expected = select(drawn, k, routes_only=routes_only_pairs(plans))
    expected.pace(drawn, floor)
    per_pair = Counter((s, d) for s, d, _ in expected.flows)
    route_pairs = Counter((s, d) for s, d, _ in expected.routes)
    paced_pairs = Counter()
    for (s, d, _sport), times in expected.paces.items():
        paced_pairs[(s, d)] += times - 1
    plans = [replace(p, probed=per_pair[(p.src.label, p.dst.label)], routes=route_pairs[(p.src.label, p.dst.label)],
                     paced=paced_pairs[(p.src.label, p.dst.label)]) for p in plans]
    hops = len(leaves.hops) + 2 * len(leaves.ends)
    return CoverPlan(plans, expected, drawn, hops, found.unreachable)


def routes_only_pairs(plans: list[PairPlan]) -> frozenset[tuple[str, str]]:
    """The (src, dst) NIC labels of the pairs planned only to test routes: select() never weighs
    their flows for links."""
    return frozenset((p.src.label, p.dst.label) for p in plans if p.routes_only)


def route_every(interval_ms: int, report_ms: int = REPORT_MS) -> int:
    """A route flow is probed in one probing interval of this many: once per reporting interval."""
    return max(1, report_ms // interval_ms)


def probe_load(plans: list[PairPlan], interval_ms: int, report_ms: int = REPORT_MS) -> dict:
    """Continuous probes per second (one port per path), total and busiest NIC."""
    per_nic: dict[str, float] = {}
    for p in plans:
        flows = p.probed + p.paced + p.routes / route_every(interval_ms, report_ms)
        per_nic[p.src.label] = per_nic.get(p.src.label, 0) + flows * 1000 / interval_ms
    return {"probes_per_s": round(sum(per_nic.values()), 1),
            "max_per_nic": round(max(per_nic.values(), default=0.0), 1),
            "discovery_packets": sum(len(p.sports) * max(0, p.hops - 1) for p in plans)}
