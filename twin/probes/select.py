"""Which discovered flows the cover mesh probes: the fewest that cross every directed link k times,
then a few more so that links or switches sharing one set of probed paths (a lossy one could not
be told from the other: two leaves every probed path crosses, a dead one named as its peer) get
told apart, as far as the candidates allow. A switch sharing its paths with one of its own links
needs nothing: naming the link is right for either fault.
Told apart is not enough when the probes that tell two links apart are few: then a sparse loss
falls on the shared paths alone for seconds, and the localizers wait, or name the wrong one of the
two. So last, no link may lie on more than half of another link's probed paths where a candidate
can change that (`_balance`).

Then routes: one more flow for each route a switch holds toward a host that a candidate tests
and no selected flow does (`_routes`: every leaf's from under it, cover.py makes sure of a
candidate); the mesh probes those sparsely.

A flow is (src NIC, dst NIC, source port); its path is the hops it crosses in order. Flows with
the same path are one path: the selection keeps one. Lazy greedy multi-cover (gains only shrink,
so a stale gain is re-checked when it comes to the top of the heap).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from twin.model.fabric import Fabric
from twin.model.nics import probe_destination
from twin.probes.cover import Hop, Leaves
from twin.probes.pace import extra_probes, paces

Flow = tuple[str, str, int]


@dataclass
class Selection:
    flows: list[Flow]
    crossings: Counter  # hop -> selected flows crossing it
    short: list[Hop] = field(default_factory=list)  # hops crossed by fewer than k selected flows
    ambiguous: list[tuple[str, ...]] = field(default_factory=list)  # link or switch names no probe tells apart
    # flows probed for routes toward hosts no flow above tests (every leaf's, and the spines' the
    # hash left out): sparsely (selection.route_every), as a route loses all it carries or nothing
    routes: list[Flow] = field(default_factory=list)
    # flows probed more than once an interval -> how many times (probes/pace.py), once `pace`d
    paces: dict[Flow, int] = field(default_factory=dict)
    # hop -> probes an interval over it, the paces counted (the crossings until paced)
    probes: Counter = field(default_factory=Counter)

    def pace(self, paths: dict[Flow, tuple[Hop, ...]], floor: int) -> None:
        """Probe flows over directions that carry fewer than `floor` probes an interval more often."""
        self.paces = paces(self.flows, paths, floor)
        self.probes = Counter(self.crossings)
        for flow, times in self.paces.items():
            for hop in set(paths[flow]):
                self.probes[hop] += times - 1

    def times_of(self, flow: Flow) -> int:
        """Probes an interval of a selected flow (routes' flows are paced by route_every instead)."""
        return self.paces.get(flow, 1)

    def summary(self, hops: int, k: int) -> dict:
        counts = sorted((self.probes or self.crossings).values())  # probes an interval a direction
        return {"flows": len(self.flows), "route_flows": len(self.routes), "paths_per_link": k,
                "paced_flows": len(self.paces), "paced_probes": extra_probes(self.paces),
                "links_min": counts[0] if counts else 0,
                "links_median": counts[len(counts) // 2] if counts else 0,
                # distinct paths, not probes: a direction one flow crosses is short however paced
                "hops_covered": sum(1 for c in self.crossings.values() if c >= k), "hops": hops,
                "ambiguous": [list(group) for group in self.ambiguous]}


def select(paths: dict[Flow, tuple[Hop, ...]], k: int, routes_only: frozenset = frozenset()) -> Selection:
    """`routes_only`: (src, dst) NIC pairs whose flows are candidates for routes alone (cover.py's),
    so the links' selection is what it would be without them. Let into it, their single ports
    spread the greedy's sources and the balancing added fewer flows (rail4 101 -> 78), and a 2 %
    drop took longer to name: over 600 simulated onsets (bench/detect_tail.py) p99 2.91 s and 4
    over 3 s, against 2.20 s and none."""
    options = _distinct({flow: path for flow, path in paths.items() if flow[:2] not in routes_only})
    every = {**_distinct(paths), **options}
    need = Counter({hop: k for path in options.values() for hop in path})
    chosen: list[Flow] = []
    per_src: Counter = Counter()
    heap = [(-len(set(path)), 0, flow) for flow, path in options.items()]
    heapq.heapify(heap)
    while heap:
        stale_gain, _load, flow = heapq.heappop(heap)
        gain = sum(1 for hop in set(options[flow]) if need[hop] > 0)
        if gain == 0:
            continue
        if gain != -stale_gain:
            heapq.heappush(heap, (-gain, per_src[flow[0]], flow))
            continue
        chosen.append(flow)
        per_src[flow[0]] += 1
        for hop in set(options[flow]):
            need[hop] -= 1
    chosen = _balance(options, _split(options, chosen))
    crossings = Counter(hop for flow in chosen for hop in set(options[flow]))
    short = sorted(hop for hop in need if crossings[hop] < k)
    routes = _routes(every, chosen)
    return Selection(sorted(chosen), crossings, short, _ambiguous(every, chosen + routes), sorted(routes))


def _distinct(paths: dict[Flow, tuple[Hop, ...]]) -> dict[Flow, tuple[Hop, ...]]:
    """One flow per distinct discovered path (the first by name), none for an empty path."""
    first: dict[tuple[Hop, ...], Flow] = {}
    for flow in sorted(paths):
        if paths[flow]:
            first.setdefault(paths[flow], flow)
    return {flow: path for path, flow in first.items()}


def routes_of(path: tuple[Hop, ...]) -> set[tuple[str, str]]:
    """The routes a path tests apart from its links: (switch, the host it leads to) for every
    switch it crosses but the last. There, at the host's own leaf, the route crosses the same
    paths as the hop into the host, and a black hole is told from that link only by what the leaf
    forwards toward the host's other NICs: the route tested from under the leaf."""
    host = path[-1][1]
    return {(to, host) for _link, to in path[:-2]}


def _routes(options: dict[Flow, tuple[Hop, ...]], chosen: list[Flow]) -> list[Flow]:
    """The fewest more flows (greedy, lazily) that test every route a candidate tests and no chosen
    flow does: first of all each leaf's toward each host (one candidate from under the leaf toward
    the host at least, cover.py), and the spines' that the hash happened to leave out."""
    tests = {flow: routes_of(path) for flow, path in options.items()}
    missing = set().union(*tests.values()) - set().union(*(tests[flow] for flow in chosen))
    heap = [(-len(routes & missing), flow) for flow, routes in tests.items() if routes & missing]
    heapq.heapify(heap)
    added: list[Flow] = []
    while heap and missing:
        stale_gain, flow = heapq.heappop(heap)
        gain = len(tests[flow] & missing)
        if gain and gain != -stale_gain:
            heapq.heappush(heap, (-gain, flow))
        elif gain:
            added.append(flow)
            missing -= tests[flow]
    return added


def elements(path: tuple[Hop, ...]) -> set[Hop]:
    """What a path can be charged with: its hops, the switches it crosses as (switch, "") (a path's
    hops lead to its switches, then to the destination host), and the routes those switches hold
    toward that host as ("switch@host", "")."""
    switches = [to for _link, to in path[:-1]]
    host = path[-1][1] if path else ""
    return set(path) | {(node, "") for node in switches} | {(f"{node}@{host}", "") for node in switches}


def confusable(names: set[str]) -> bool:
    """Names sharing one set of probed paths that a fault could be charged to the wrong one of:
    two links, or two switches (a switch, or a route it holds), or one and a link not its own."""
    links = {n for n in names if " -- " in n}
    nodes = {n.split("@")[0] for n in names - links}
    return len(links) > 1 or len(nodes) > 1 or any(not nodes & set(link.split(" -- ")) for link in links if nodes)


def _signatures(options: dict[Flow, tuple[Hop, ...]], chosen: list[Flow]) -> dict[frozenset, set[str]]:
    """Set of selected flows crossing an element -> the link and switch names with exactly that set."""
    crossing: dict[Hop, set[Flow]] = defaultdict(set)
    for flow in chosen:
        for hop in elements(options[flow]):
            crossing[hop].add(flow)
    groups: dict[frozenset, set[str]] = defaultdict(set)
    for hop, flows in crossing.items():
        groups[frozenset(flows)].add(hop[0])
    return groups


def _ambiguous(options, chosen) -> list[tuple[str, ...]]:
    return sorted({tuple(sorted(names)) for names in _signatures(options, chosen).values() if confusable(names)})


def _split(options: dict[Flow, tuple[Hop, ...]], chosen: list[Flow]) -> list[Flow]:
    """Add, while names that could be taken for one another are probed by exactly the same flows,
    an unselected flow that crosses some but not all of one such group (of those, the one that
    does so for the most groups); stop when none splits any.

    The groups are `_signatures`' kept up to date by partition refinement: adding a flow moves
    each element it crosses from its group to that group's successor (same flows plus this one),
    so no set of flows is hashed again. Rebuilt from scratch each round, they held the runner's
    interpreter lock a third of the time in a pod128 drill (3,900 flows; py-spy --gil) while the
    mesh selected again after a reroute. A group is split from the flows over its own names (all
    candidates weighed against all groups each round took 7.6 s of CPU for pod128's plan); a group
    none of them splits never will be, nor will the groups it refines into."""
    chosen, taken = list(chosen), set(chosen)
    names_of = {flow: {hop[0] for hop in elements(path)} for flow, path in options.items()}
    order = {flow: number for number, flow in enumerate(names_of)}  # ties go to the first
    flows_on: dict[str, list[Flow]] = defaultdict(list)
    for flow, names in names_of.items():
        for name in names:
            flows_on[name].append(flow)
    partition = _Partition()
    for flow in chosen:
        partition.add(elements(options[flow]))
    never: list[frozenset] = []  # groups no candidate splits
    while True:
        groups = [g for g in partition.groups() if not any(g <= stuck for stuck in never)]
        if not groups:
            return chosen
        in_groups: dict[str, list[int]] = defaultdict(list)
        for number, group in enumerate(groups):
            for name in group:
                in_groups[name].append(number)
        group = groups[0]
        best, best_splits = None, 0
        for flow in {flow for name in group for flow in flows_on[name]} - taken:
            touched = Counter(number for name in names_of[flow] for number in in_groups.get(name, ()))
            if touched[0] == len(group):  # crosses all of it: no split of this one
                continue
            splits = sum(1 for number, shared in touched.items() if shared < len(groups[number]))
            if splits > best_splits or (splits == best_splits and order[flow] < order[best]):
                best, best_splits = flow, splits
        if best is None:
            never.append(frozenset(group))
            continue
        chosen.append(best)
        taken.add(best)
        partition.add(elements(options[best]))


def _balance(options: dict[Flow, tuple[Hop, ...]], chosen: list[Flow]) -> list[Flow]:
    """Add flows while a link lies on more than half of another link's probed paths and a flow can
    lower that. Measured on rail4 (a 2 % drop on a leaf uplink, 2026-11-27): 2 of the uplink's 3
    probed flows came from one NIC, so two thirds of its losses fell on that NIC's host link too,
    and the losses that tell them apart came at under 2 a second; over 600 simulated onsets
    (bench/detect_tail.py) the greedy localizer named another link first in 33 and took over 3 s
    in 5 (CI's hash-dodge drill: 3.008 s). Balanced: 14 and 0, at 52 % more probed flows on rail4
    (64 -> 97), 45 % on rail8, 23 % on pod128.

    Greedy on the excess: the sum over pairs (link F, link l on F's paths) of max(0, 2 shared - F's
    paths). A flow lowers it where it crosses F without a dominating l and raises it where it
    crosses both; the flow with the largest fall among those that cross a violating link without
    its dominant is added; stop when none lowers it. Each round is bounded by the flows over one
    link, and a flow is added once."""
    chosen, taken = list(chosen), set(chosen)
    links_of = {flow: frozenset(hop[0] for hop in path) for flow, path in options.items()}
    flows_on: dict[str, list[Flow]] = defaultdict(list)
    for flow, links in links_of.items():
        for name in links:
            flows_on[name].append(flow)
    # Links on every candidate over a link (its host's own link, on a leaf of one host) cannot be
    # balanced and do not count.
    always = {name: frozenset.intersection(*(links_of[flow] for flow in flows)) for name, flows in flows_on.items()}
    paths_over: Counter = Counter()  # link -> chosen flows over it
    shared: dict[str, Counter] = defaultdict(Counter)  # link -> other link -> chosen flows over both

    def take(flow: Flow) -> None:
        links = links_of[flow]
        for name in links:
            paths_over[name] += 1
            for other in links - {name}:
                shared[name][other] += 1

    def fall(flow: Flow) -> int:
        """How much the excess falls if `flow` is added."""
        links, change = links_of[flow], 0
        for name in links:
            for other, both in shared[name].items():
                if other in always[name]:
                    continue
                margin = 2 * both - paths_over[name]
                if other in links:
                    change -= 1 if margin >= 0 else 0
                elif margin > 0:
                    change += 1
        return change

    for flow in chosen:
        take(flow)
    stuck: set[tuple[str, str]] = set()  # violations no flow lowers the excess for
    pending = sorted(paths_over)  # links that may violate: all at first, then those a new flow crosses
    heapq.heapify(pending)
    while pending:
        name = heapq.heappop(pending)
        other = next((other for other, both in sorted(shared[name].items())
                      if 2 * both > paths_over[name] >= 2 and other not in always[name]
                      and (name, other) not in stuck), None)
        if other is None:
            continue
        best = max((flow for flow in flows_on[name] if flow not in taken and other not in links_of[flow]),
                   key=lambda flow: (fall(flow), -len(links_of[flow]), flow), default=None)
        if best is None or fall(best) <= 0:
            stuck.add((name, other))
        else:
            chosen.append(best)
            taken.add(best)
            take(best)
            for each in links_of[best]:
                heapq.heappush(pending, each)
        heapq.heappush(pending, name)
    return chosen


class _Partition:
    """Hops grouped by the set of selected flows that cross them (hops no flow crosses: none)."""

    def __init__(self):
        self.group_of: dict[Hop, int] = {}
        self.members: dict[int, set[Hop]] = {}
        self._next = 0

    def add(self, hops: set[Hop]) -> None:
        """A flow crossing `hops` was selected."""
        successor: dict[int | None, int] = {}
        for hop in hops:
            before = self.group_of.get(hop)
            if before not in successor:
                successor[before] = self._next
                self.members[self._next] = set()
                self._next += 1
            after = successor[before]
            if before is not None:
                self.members[before].discard(hop)
                if not self.members[before]:
                    del self.members[before]
            self.members[after].add(hop)
            self.group_of[hop] = after

    def groups(self) -> list[set[str]]:
        """The names of each group whose members could be taken for one another (`confusable`)."""
        named = ({hop[0] for hop in hops} for hops in self.members.values() if len(hops) > 1)
        return [names for names in named if len(names) > 1 and confusable(names)]


class Directions:
    """Turn a discovered path (link names in order, None where a hop did not answer) into hops."""

    def __init__(self, fabric: Fabric):
        self.leaves = Leaves(fabric)
        self.ends = {link.name: (link.a.node, link.b.node) for link in fabric.links}
        # NIC label -> (its host, the leaves that deliver to it: a dual-port NIC's port, both its NIC's)
        self.host_of = {end.label: (end.host, end.delivering_leaves)
                        for nic in self.leaves.nics for end in (nic, probe_destination(nic))}

    def hops(self, src: str, links: tuple[str | None, ...], dst: str) -> tuple[Hop, ...]:
        at, (dst_host, dst_leaves) = self.host_of[src][0], self.host_of[dst]
        out = []
        for name in links:
            if name is None or name not in self.ends:
                at = None  # a hop that did not answer: the next known link is oriented by distance
                continue
            a, b = self.ends[name]
            if at in (a, b):
                to = b if at == a else a
            else:
                def distance(node: str) -> float:
                    return -1 if node == dst_host else \
                        min(self.leaves.distance(leaf).get(node, math.inf) for leaf in dst_leaves)
                to = min((a, b), key=distance)
            out.append((name, to))
            at = to
        return tuple(out)
