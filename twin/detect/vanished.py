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
- a switch whose every link crossed before is gone (at least two) is named `switch_down`;
- otherwise a single gone link is named `link_down`, only when it is the one thing gone;
- several gone links that no switch explains are named by nothing.
A link gone stays gone (and named) until a path crosses it again.
"""

from __future__ import annotations

CONFIRM_S = 0.5  # settled intervals pooled after a transition before comparing (a slow agent's rows)


class VanishedLinks:
    def __init__(self, switch_links: dict[str, set[str]], confirm: int = 2):
        self.switch_links = switch_links  # canonical link names per switch
        self.confirm = confirm
        self._crossed: set[str] = set()  # links crossed while routes were settled
        self._before: set[str] | None = None  # _crossed frozen when a transition began
        self._after: set[str] = set()
        self._settled = 0
        self._sources: set[str] = set()
        self.gone: set[str] = set()

    def observe(self, crossed: set[str], rerouting: bool, sources: set[str] = frozenset()) -> None:
        """One interval: the links its probed paths crossed, whether routes were moving, and the
        sources that reported. An interval without a source seen before is partial (an agent the
        mesh stopped waiting for): its missing paths say nothing, and it is not counted."""
        if not sources >= self._sources:
            return
        self._sources |= sources
        if rerouting:
            if self._before is None:
                self._before = set(self._crossed)
            self._after, self._settled = set(), 0
            return
        self.gone -= crossed
        if self._before is None:
            self._crossed |= crossed
            return
        self._after |= crossed
        self._settled += 1
        if self._settled >= self.confirm:
            self.gone |= self._before - self._after
            self._crossed, self._before = set(self._after), None

    def names(self) -> dict[str, str]:
        """name -> kind, by the rules above."""
        if not self.gone:
            return {}
        named: dict[str, str] = {}
        explained: set[str] = set()
        for node, links in self.switch_links.items():
            known = links & (self.gone | self._crossed | (self._before or set()))
            if len(known) >= 2 and known <= self.gone:
                named[node] = "switch_down"
                explained |= known
        rest = self.gone - explained
        if not named and len(rest) == 1:
            named[next(iter(rest))] = "link_down"
        return named
