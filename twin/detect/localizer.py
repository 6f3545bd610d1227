"""probe-localizer: name the faulty link(s) from per-path probe loss and the links each path crosses.

Each interval the localizer pools the last `window` intervals per path, then explains the lost
probes greedily, as network tomography does with a sparse set of bad links:
1. every link gets the probes lost and sent on the paths that cross it;
2. the link whose paths lost the most probes is the best explanation (ties: a link already
   named, then the higher loss rate, i.e. fewer clean paths through it); it is named if it carries at least `min_lost`
   lost probes, its loss rate is at least `min_rate`, and it lost probes in at least `persist`
   of the pooled intervals: a fault persists, while the loss of a routing transition (a link
   going down before BFD and ECMP move traffic, a route coming back) lasts one interval, and
   is charged to paths that are no longer the ones the probes took;
3. the paths it explains are set aside and the rest is explained again, so two faults far
   apart are both named; a link only on paths already explained is not named twice.
When another link lies on exactly the same lossy paths (the two leaf links of a spine, on a
same-rail path) but not on the same paths overall, naming waits up to `window` intervals for a
loss that tells them apart.
Before that, a switch that loses (nearly) every probe crossing it, on paths over two or more
of its links, is named as the switch (a switch fault shows on every one of its links), and
the paths it explains are set aside.

A name is emitted once when it first appears; it is forgotten after `forget_after` intervals
without evidence and may then be named again.
"""

from __future__ import annotations

from twin.detect.window import PooledPath, WindowedLocalizer, loss_per_path

DETECTOR = "probe-localizer"
DEAD_RATE = 0.9  # a switch whose paths lose this share of their probes (window.loss_per_path) is down
PLAUSIBLE_LOSSES = 3  # a rival whose clean probes should have lost this many (P(none) ~ 5 %) is ruled out


class Localizer(WindowedLocalizer):
    detector = DETECTOR

    def __init__(self, switch_links: dict[str, set[str]] | None = None, window: int = 4, min_lost: int = 2,
                 min_rate: float = 0.002, persist: int = 2, forget_after: int = 6):
        super().__init__(switch_links, window, forget_after)
        self.min_lost, self.min_rate, self.persist = min_lost, min_rate, persist
        self._deferred: dict[frozenset, int] = {}  # links the loss cannot tell apart -> intervals waited

    def explain(self, paths: list[PooledPath]) -> dict[str, tuple[str, float]]:
        """name -> (kind guess, confidence) for the links (or switches) that explain the loss."""
        total_lost = sum(p.lost for p in paths)
        if total_lost < self.min_lost:
            return {}
        named = self._dead_switches(paths, total_lost)
        pending: set[frozenset] = set()
        remaining = [p for p in paths if p.lost and not any(node_links & set(p.links) for node_links in
                                                            (self.switch_links[n] for n in named))]
        while remaining:
            stats: dict[str, list[int]] = {}
            for path in paths:
                for link in path.links:
                    stats.setdefault(link, [0, 0])[0] += path.sent
            for path in remaining:
                for link in path.links:
                    stats[link][1] += path.lost
            # Ties on lost probes: a link already named keeps explaining them (a sparse loss
            # clustering on a sub-path must not produce a second name), then the higher rate.
            best = max((link for link in stats if stats[link][1]),
                       key=lambda each: (stats[each][1], each in self._named, stats[each][1] / max(1, stats[each][0])),
                       default=None)
            if best is None:
                break
            sent, lost = stats[best]
            rate = lost / max(1, sent)
            explained = [p for p in remaining if best in p.links]
            seen_in = set().union(*(p.lossy_intervals for p in explained))
            if lost < self.min_lost or rate < self.min_rate or len(seen_in) < self.persist:
                break
            if self._ambiguous(best, explained, stats, pending, paths):
                break
            kind = "link_down" if rate > 0.95 else "silent_drop"
            confidence = min(1.0, lost / total_lost) * (1 - 0.5 ** lost)
            named[best] = (kind, confidence)
            remaining = [p for p in remaining if best not in p.links]
        self._deferred = {key: n for key, n in self._deferred.items() if key in pending}
        return named

    def _ambiguous(self, best: str, explained: list[PooledPath], stats: dict, pending: set,
                   paths: list[PooledPath]) -> bool:
        """Another link lies on exactly the same lossy paths (a same-rail path crosses both leaf
        links of its spine) but not on the same paths overall, and its loss-free probes do not
        rule it out: the loss cannot tell them apart yet, a later loss may, and meanwhile the rate
        tie-break would favour the less probed link. Wait for it, at most `window` intervals, unless
        `best` is already named. (Links on exactly the same paths, as on a 2-leaf fabric, can never be
        told apart: no wait.)"""
        crossing = {p.links for p in paths if best in p.links}

        def plausible(link: str) -> bool:
            # Were the rival the culprit, at the loss rate that makes (its sent, these lost), its
            # loss-free paths that avoid `best` should have lost some too: enough of them rule it
            # out (a black hole toward a host spares that host's link on paths over the other
            # spine). Only those tell the two apart: its clean paths over `best` are clean under
            # either cause, and counted, they ruled out the true culprit for its sibling
            # (rail4: a leaf uplink's 4 losses all on paths over one superspine link, the uplink
            # out at 590 clean probes x 4/600, the superspine link named).
            clean = sum(p.sent for p in paths if link in p.links and best not in p.links and not p.lost)
            return clean * stats[link][1] / max(1, stats[link][0]) < PLAUSIBLE_LOSSES

        rivals = frozenset(link for link in stats if link != best and stats[link][1] == stats[best][1]
                           and all(link in p.links for p in explained)
                           and {p.links for p in paths if link in p.links} != crossing and plausible(link))
        if not rivals or best in self._named:
            return False
        key = rivals | {best}
        pending.add(key)
        self._deferred[key] = self._deferred.get(key, 0) + 1
        return self._deferred[key] <= self.window

    def _dead_switches(self, paths: list[PooledPath], total_lost: int) -> dict[str, tuple[str, float]]:
        """Switches through which (nearly) every probe is lost, where no single one of their links
        explains the loss (else that link is the simpler answer)."""
        dead = {}
        on_link: dict[str, list[PooledPath]] = {}
        for path in paths:
            for link in path.links:
                on_link.setdefault(link, []).append(path)
        for node, links in self.switch_links.items():
            # each path once, by the links it crosses (208 switches x 4,000 paths, a set each, took
            # a tenth of the runner's CPU in a pod128 drill)
            through = list({id(p): p for link in links for p in on_link.get(link, ())}.values())
            lost = sum(p.lost for p in through)
            lossy = [p for p in through if p.lost]
            one_link_explains = any(all(link in p.links for p in lossy) for link in links)
            seen_in = set().union(*(p.lossy_intervals for p in lossy))
            if lossy and not one_link_explains and lost >= self.min_lost \
                    and loss_per_path((p.sent, p.lost) for p in through) >= DEAD_RATE \
                    and len(seen_in) >= self.persist:
                dead[node] = ("switch_down", min(1.0, lost / total_lost))
        return dead
