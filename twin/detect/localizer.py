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

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from twin.detect.verdicts import Verdict
from twin.model.fabric import link_key
from twin.model.targets import Target

DETECTOR = "probe-localizer"
WINDOW_S = 2.0  # evidence pooled over this long, whatever the probes' reporting interval
FORGET_S = 3.0
DEAD_RATE = 0.9
PLAUSIBLE_LOSSES = 3  # a rival whose clean probes should have lost this many (P(none) ~ 5 %) is ruled out  # a switch loses at least this share of the probes crossing it: the switch, not a link


@dataclass
class _Path:
    links: tuple[str, ...]
    sent: int = 0
    lost: int = 0
    lossy_intervals: set = field(default_factory=set)


class Localizer:
    def __init__(self, switch_links: dict[str, set[str]] | None = None, window: int = 4, min_lost: int = 2,
                 min_rate: float = 0.002, persist: int = 2, forget_after: int = 6):
        self.switch_links = {node: {link_key(l) for l in links} for node, links in (switch_links or {}).items()}
        self.window, self.min_lost, self.min_rate, self.forget_after = window, min_lost, min_rate, forget_after
        self.persist = persist
        # The window, pooled as it moves: each interval is added once and taken out once, so an
        # interval costs O(paths) however long the window (pooling it afresh every interval was
        # most of the probe follower's time at a thousand paths).
        self._recent: deque[tuple[int, dict]] = deque()
        self._pool: dict[tuple, _Path] = {}
        self._lost_in_window = 0
        self._serial = 0
        self._keys: dict[tuple, tuple[str, ...]] = {}  # a discovered path's names -> canonical link names
        self._named: dict[str, int] = {}  # name -> intervals since last evidence
        self._deferred: dict[frozenset, int] = {}  # links the loss cannot tell apart -> intervals waited

    @classmethod
    def for_interval(cls, switch_links: dict[str, set[str]], report_s: float) -> "Localizer":
        """Window and memory in seconds: shorter intervals name a fault sooner (persist counts
        intervals), and still pool WINDOW_S of evidence, which sparse loss needs."""
        return cls(switch_links, window=max(4, round(WINDOW_S / report_s)),
                   forget_after=max(6, round(FORGET_S / report_s)))

    def observe(self, t: float, samples: Iterable) -> list[Verdict]:
        """Feed one interval's path samples (src, dst, sport, links, sent, lost); returns new verdicts."""
        self._add(samples)
        suspects = self.explain(list(self._pool.values())) if self._lost_in_window >= self.min_lost else {}
        verdicts = []
        for name, (kind, confidence) in suspects.items():
            if name not in self._named:
                link = name if Target.parse(name).is_link else None
                verdicts.append(Verdict(t=t, detector=DETECTOR, kind=kind, link=link,
                                        node=None if link else name, confidence=round(confidence, 3)))
            self._named[name] = 0
        for name in list(self._named):
            if name not in suspects:
                self._named[name] += 1
                if self._named[name] >= self.forget_after:
                    del self._named[name]
        return verdicts

    def _add(self, samples: Iterable) -> None:
        self._serial += 1
        counts: dict[tuple, tuple[int, int]] = {}
        for s in samples:
            links = self._keyed(tuple(s.links))
            if not links:
                continue
            key = (s.src, s.dst, s.sport)
            sent, lost = s.sent - getattr(s, "held", 0), s.lost  # held by PFC: neither lost nor clean
            path = self._pool.get(key)
            if path is None:
                path = self._pool[key] = _Path(links)
            path.links = links  # the newest discovery wins
            path.sent += sent
            path.lost += lost
            if lost:
                path.lossy_intervals.add(self._serial)
            before = counts.get(key, (0, 0))
            counts[key] = (before[0] + sent, before[1] + lost)
            self._lost_in_window += lost
        self._recent.append((self._serial, counts))
        if len(self._recent) > self.window:
            serial, old = self._recent.popleft()
            for key, (sent, lost) in old.items():
                path = self._pool[key]
                path.sent -= sent
                path.lost -= lost
                path.lossy_intervals.discard(serial)
                self._lost_in_window -= lost
                if not any(key in counts for _serial, counts in self._recent):
                    del self._pool[key]  # not probed within the window any more

    def _keyed(self, names: tuple) -> tuple[str, ...]:
        keyed = self._keys.get(names)
        if keyed is None:
            keyed = self._keys[names] = tuple(link_key(l) for l in names if l)
        return keyed

    def explain(self, paths: list[_Path]) -> dict[str, tuple[str, float]]:
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
                       key=lambda l: (stats[l][1], l in self._named, stats[l][1] / max(1, stats[l][0])),
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

    def _ambiguous(self, best: str, explained: list[_Path], stats: dict, pending: set, paths: list[_Path]) -> bool:
        """Another link lies on exactly the same lossy paths (a same-rail path crosses both leaf
        links of its spine) but not on the same paths overall, and its loss-free probes do not
        rule it out: the loss cannot tell them apart yet, a later loss may, and meanwhile the rate
        tie-break would favour the less probed link. Wait for it, at most `window` intervals, unless `best` is already named. (Links on
        exactly the same paths, as on a 2-leaf fabric, can never be told apart: no wait.)"""
        crossing = {p.links for p in paths if best in p.links}

        def plausible(link: str) -> bool:
            # Were the rival the culprit, at the loss rate that makes (its sent, these lost), its
            # loss-free paths should have lost some too: enough of them rule it out (a black
            # hole toward a host spares that host's link on paths over the other spine).
            clean = sum(p.sent for p in paths if link in p.links and not p.lost)
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

    def _dead_switches(self, paths: list[_Path], total_lost: int) -> dict[str, tuple[str, float]]:
        """Switches through which (nearly) every probe is lost, where no single one of their links
        explains the loss (else that link is the simpler answer)."""
        dead = {}
        for node, links in self.switch_links.items():
            through = [p for p in paths if links & set(p.links)]
            sent, lost = sum(p.sent for p in through), sum(p.lost for p in through)
            lossy = [p for p in through if p.lost]
            one_link_explains = any(all(link in p.links for p in lossy) for link in links)
            seen_in = set().union(*(p.lossy_intervals for p in lossy))
            if lossy and not one_link_explains and lost >= self.min_lost and lost >= DEAD_RATE * sent \
                    and len(seen_in) >= self.persist:
                dead[node] = ("switch_down", min(1.0, lost / total_lost))
        return dead
