"""What probe-likelihood weighs as the cause of a probed path's loss, per path, and the name a
verdict gives each cause.

- A directed link (a hop), `L>to`: link L loses what it carries toward node `to`. A bad optic,
  a bit-flipping port or a one-way drop loses one direction; the other direction's clean probes
  are no evidence against it, and the link as a whole would count them against it (a one-way 2 %
  drop on a host link looked like 1 % over twice the probes, and its rivals were harder to rule
  out).
- A link, `L`: both directions at one rate, for a fault both ways (a bit-flipping cable): each
  direction alone has half its evidence, and was named a second later.
- A route at a switch, `X@d`: switch X discards what it forwards toward NIC d (a black hole: a
  bad route entry, BGP still advertising), or toward every NIC of host d (its prefixes). That is
  the loss of no single link: X's links also carry clean probes to other destinations, and d's
  own host link carries clean probes that reach d over other switches, so a black hole used to
  be charged, partially, to one of those. A route loses all it carries or nothing; `explain`
  weighs it only then. Toward a NIC, not at its own leaf: there the route and the hop `leaf>d`
  cross exactly the same paths, and the hop is the one named; toward a host, at every switch (a
  leaf discarding what it forwards toward a host discards it toward the NIC it serves too).
- A switch, `X`: every path over X loses all it carries (a dead switch, before routing moves
  around it). A route at a neighbour toward a host gathers the paths into and out of that host's
  dead leaf and outscored each of the leaf's hops; the switch gathers them all. Weighed only when
  no single link of X is on every lossy path (that link is the smaller claim).
- What did not answer, `?X|Y`: the hops between X and Y of a path whose discovery got no answer
  there (a flow a fault silences past the faulty link, rediscovered after routes moved). Its
  loss may be anywhere in there: charged to the known links around it, it named healthy host
  links. It names nothing; it only takes the loss it explains from the others.
A path may end at a switch (transport-state's TTL probes, which expire there): it has no routes.
A verdict names a hop or a link by the link (kind `silent_drop` or `link_down`), a route by its
switch (kind `blackhole`) and a switch by itself (kind `switch_down`).
"""

from __future__ import annotations

from collections import defaultdict

from twin.model.fabric import link_key

HOP, ROUTE, UNKNOWN = ">", "@", "?"


def is_route(hypothesis: str) -> bool:
    return ROUTE in hypothesis


def is_hop(hypothesis: str) -> bool:
    return HOP in hypothesis


def on_link(hypothesis: str) -> bool:
    """A link or one direction of it: partial loss is its kind of fault."""
    return " -- " in hypothesis


def is_unknown(hypothesis: str) -> bool:
    return hypothesis.startswith(UNKNOWN)


def precedence(hypothesis: str) -> int:
    """Among hypotheses over the same paths: what did not answer (named by nothing), a link, a
    switch, a route."""
    return -1 if is_unknown(hypothesis) else 0 if on_link(hypothesis) else 2 if is_route(hypothesis) else 1


class Hypotheses:
    """Builds each path's hypotheses once, and remembers for every hypothesis seen its verdict
    name and the switches it belongs to (a switch fault shows on all of them)."""

    def __init__(self, switches: set[str]):
        self.switches = set(switches)
        self.name: dict[str, str] = {}  # hypothesis -> the link or node a verdict names
        self.nodes: dict[str, frozenset[str]] = {}  # hypothesis -> the switches it touches
        self.of_switch: dict[str, set[str]] = defaultdict(set)  # switch -> its hypotheses seen so far
        self._paths: dict[tuple, tuple[str, ...]] = {}

    def of_path(self, src: str, links: tuple, dst: str) -> tuple[str, ...]:
        """The hops of a discovered path (link names in order from NIC src to NIC dst, None where a
        hop did not answer), its links, the routes at the switches it crosses, the switches."""
        key = (src, links, dst)
        if key not in self._paths:
            self._paths[key] = self._build(src, links, dst)
        return self._paths[key]

    def _build(self, src: str, links: tuple, dst: str) -> tuple[str, ...]:
        names = [link_key(link) if link else None for link in links]
        hops, visited, gaps, at = [], [], [], src.split(":")[0]
        before = at  # the last node known before a stretch of hops that did not answer
        for number, link in enumerate(names):
            if link is None:
                before, at = before if at is None else at, None
                continue
            to = self._entered(link, at, names[number + 1:], dst.split(":")[0])
            if at is None:  # the stretch ends where this link begins
                after = next((end for end in link.split(" -- ") if end != to), None) if to else None
                gaps.append(self._add(f"{UNKNOWN}{before}|{after}", "", ()))
            if to is None:  # after two silent hops: which way it was crossed is unknown
                before, at = before, None
                continue
            hops.append(self._add(f"{link}{HOP}{to}", link, link.split(" -- ")))
            visited.append(to)
            at = before = to
        dst_node = dst.split(":")[0]
        last = names[-1].split(" -- ") if names and names[-1] else ()
        leaf = next((end for end in last if end != dst_node), None)  # d's own leaf
        at_switches = [node for node in dict.fromkeys(visited) if node in self.switches]
        routes = [self._add(f"{node}{ROUTE}{dst}", node, (node,)) for node in at_switches if node != leaf]
        routes += [self._add(f"{node}{ROUTE}{dst_node}", node, (node,)) for node in at_switches]
        if dst_node in self.switches:  # a TTL probe that expires at a switch: no route took it anywhere
            routes = []
        switches = [self._add(node, node, (node,)) for node in at_switches]
        links = [self._add(link, link, link.split(" -- ")) for link in dict.fromkeys(n for n in names if n)]
        return (*hops, *links, *routes, *switches, *gaps)

    @staticmethod
    def _entered(link: str, at: str | None, later: list, dst_node: str) -> str | None:
        """The end of `link` the path entered: the far end from where it was; after a hop that did
        not answer, the end it shares with the next known link (or the destination)."""
        a, b = link.split(" -- ")
        if at in (a, b):
            return b if at == a else a
        following = next((name for name in later if name), None)
        shared = {a, b} & (set(following.split(" -- ")) if following else {dst_node})
        return shared.pop() if len(shared) == 1 else None

    def _add(self, hypothesis: str, name: str, nodes) -> str:
        if hypothesis not in self.name:
            self.name[hypothesis] = name
            mine = frozenset(n for n in nodes if n in self.switches)
            self.nodes[hypothesis] = mine
            for node in mine:
                self.of_switch[node].add(hypothesis)
        return hypothesis
