"""Links the probed paths stopped crossing across a routing transition: a switch or link that
went down without losing probes beyond the transition.

A dead spine or superspine (or a cut fibre between switches) loses probes only while routes move,
and the localizers set those intervals aside (probes/transitions.py): its peers withdraw its
routes at once, every flow rehashes onto the survivors and no probe is lost after. What remains
is in the paths: once the agents have rediscovered, no probed path crosses it any more, while the
selection still covers every link some discovered path crosses. So the links crossed before a
transition and not after it are down, as an operator's path-change alarm would say.

Naming is conservative, because a transition can also move a healthy link's last probed flows
elsewhere (ECMP rehashes when a group's size changes):
- a switch whose every link crossed before is gone (at least two) is named `switch_down`, when it
  is the only such switch that another one does not strand: a dead leaf takes with it the spines
  above it that serve no other leaf (no shortest path between two live leaves crosses them), and
  they are not dead; two or more left name nothing;
- otherwise a single gone link is named `link_down`, only when it is the one thing gone;
- several gone links that no switch explains are named by nothing.
A link gone stays gone (and named) until a path crosses it again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping

CONFIRM_S = 0.5  # settled intervals pooled after a transition before comparing (a slow agent's rows)


def usable_links(switch_links: dict[str, set[str]], dead: set[str]) -> set[str]:
    """The links some shortest path between two NICs of live leaves crosses once the `dead`
    switches are gone (hosts forward nothing; a path goes up to a common switch and down again)."""
    switches = set(switch_links) - dead
    adjacent: dict[str, set[str]] = {node: set() for node in switches}
    hosts_of: dict[str, set[str]] = {node: set() for node in switches}
    link_of: dict[frozenset, str] = {}
    for node in switches:
        for link in switch_links[node]:
            other = next((end for end in link.split(" -- ") if end != node), node)
            if other in switch_links:
                if other in switches:
                    adjacent[node].add(other)
                    link_of[frozenset((node, other))] = link
            else:
                hosts_of[node].add(link)
    leaves = {node for node in switches if hosts_of[node]}
    usable = {link for leaf in leaves if len(leaves) > 1 or len(hosts_of[leaf]) > 1 for link in hosts_of[leaf]}
    for source in leaves:
        distance, order, queue = {source: 0}, [], deque([source])
        while queue:
            node = queue.popleft()
            order.append(node)
            for other in adjacent[node]:
                if other not in distance:
                    distance[other] = distance[node] + 1
                    queue.append(other)
        leads = {}  # leads on toward a live leaf other than the source, along shortest paths
        for node in reversed(order):
            leads[node] = (node in leaves and node != source) or any(
                leads.get(other) for other in adjacent[node] if distance.get(other) == distance[node] + 1)
        for node in order:
            for other in adjacent[node]:
                if distance.get(other) == distance[node] + 1 and leads[other]:
                    usable.add(link_of[frozenset((node, other))])
    return usable


class VanishedLinks:
    def __init__(self, switch_links: dict[str, set[str]], confirm: int = 2):
        self.switch_links = switch_links  # canonical link names per switch
        self.confirm = confirm
        self._crossed: dict[str, set] = {}  # link -> the flows that crossed it while routes were settled
        self._before: dict[str, set] | None = None  # _crossed frozen when a transition began
        self._after: dict[str, set] = {}
        self._after_fine: dict = {}  # flow -> whole and not losing everything in every settled interval
        self._settled = 0
        self._sources: set[str] = set()
        self._usable_cache: dict[frozenset, set[str]] = {}
        self.gone: set[str] = set()

    def observe(self, flows: Mapping[Hashable, tuple[Iterable[str], bool]], rerouting: bool,
                sources: set[str] = frozenset()) -> None:
        """One interval: each probed flow's links and whether it is evidence (its path known
        whole, not losing everything), whether routes were moving, and the sources that reported.
        An interval without a source seen before is partial (an agent the mesh stopped waiting
        for): its missing paths say nothing, and it is not counted.

        A link is gone when flows that crossed it before the transition are fine after it and no
        flow crosses it any more. Flows that died with it (a dead leaf's NICs) say nothing of the
        links they crossed: a superspine all of whose probed flows went to a dead leaf's NICs
        looked gone, and was named dead beside the leaf."""
        if not sources >= self._sources:
            return
        self._sources |= sources
        if rerouting:
            if self._before is None:
                self._before = {link: set(crossing) for link, crossing in self._crossed.items()}
            self._after, self._after_fine, self._settled = {}, {}, 0
            return
        for flow, (links, _fine) in flows.items():
            for link in links:
                self.gone.discard(link)
                (self._crossed if self._before is None else self._after).setdefault(link, set()).add(flow)
        if self._before is None:
            return
        for flow, (_links, fine) in flows.items():
            self._after_fine[flow] = self._after_fine.get(flow, True) and fine
        self._settled += 1
        if self._settled >= self.confirm:
            fine = {flow for flow, ok in self._after_fine.items() if ok}
            self.gone |= {link for link, crossing in self._before.items()
                          if link not in self._after and crossing & fine}
            self._crossed, self._before = self._after, None

    def names(self) -> dict[str, str]:
        """name -> kind, by the rules above."""
        if not self.gone:
            return {}
        dead: dict[str, set[str]] = {}  # switches whose every known link is gone -> those links
        for node, links in self.switch_links.items():
            known = links & (self.gone | self._crossed.keys() | (self._before or {}).keys())
            if len(known) >= 2 and known <= self.gone:
                dead[node] = known
        if len(dead) > 1:
            usable = {node: self._usable(frozenset({node})) for node in dead}
            dead = {node: known for node, known in dead.items()
                    if not any(other != node and not known & usable[other] for other in dead)}
        if len(dead) == 1:
            return {node: "switch_down" for node in dead}
        if not dead and len(self.gone) == 1:
            return {next(iter(self.gone)): "link_down"}
        return {}

    def _usable(self, dead: frozenset) -> set[str]:
        if dead not in self._usable_cache:
            self._usable_cache[dead] = usable_links(self.switch_links, set(dead))
        return self._usable_cache[dead]
