"""What the probe localizers share: the probe mesh's path samples pooled over a moving window of
intervals, and the verdict contract (a name is emitted once when it first appears, forgotten
after `forget_after` intervals without evidence, and may then be named again).

A subclass says which names explain the window's loss: `explain(paths) -> {name: (kind, confidence)}`,
a name being a link or node, or a tuple of links the probes cannot tell apart (a set verdict).
Both also name what the probed paths stopped crossing across a routing transition (vanished.py),
which loses no probe outside the transition. A set that holds a link already named is not a new
verdict: once the window has let go of the evidence that told that link apart (the paths of its
other direction), the loss left on its paths is a set again, and the link still explains it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from twin.detect.vanished import CONFIRM_S, VanishedLinks
from twin.detect.verdicts import Verdict
from twin.model.fabric import link_key
from twin.model.targets import Target

WINDOW_S = 2.0  # evidence pooled over this long, whatever the probes' reporting interval
FORGET_S = 3.0


def loss_per_path(counts: Iterable[tuple[int, int]]) -> float:
    """The share of its probes each path lost, (sent, lost), averaged over the paths that sent any.

    Whether a switch is dead is asked of its paths, each weighed once, not of its probes: the mesh
    probes lossy paths several times as often as clean ones (focus, pacing), so a leaf whose
    lossy paths all lead to one cut-off host lost 93 % of the probes over it while a quarter of
    its paths (7 of 27) crossed it whole, and was named dead (misconfig on rail4, 2026-11-30). A dead
    switch loses every path through it."""
    shares = [lost / sent for sent, lost in counts if sent]
    return sum(shares) / len(shares) if shares else 0.0


@dataclass
class PooledPath:
    links: tuple[str, ...]
    sent: int = 0
    lost: int = 0
    lossy_intervals: set = field(default_factory=set)
    latest: tuple[int, int, int] = (0, 0, 0)  # (interval, sent, lost) of the last interval it was probed in
    key: tuple = ()  # (src, dst, sport): whose samples it pools


class WindowedLocalizer:
    detector = ""

    def __init__(self, switch_links: dict[str, set[str]] | None = None, window: int = 4, forget_after: int = 6):
        self.switch_links = {node: {link_key(link) for link in links} for node, links in (switch_links or {}).items()}
        self.window, self.forget_after = window, forget_after
        # Pooled as the window moves: each interval is added once and taken out once, so an
        # interval costs O(paths) however long the window (pooling it afresh every interval was
        # most of the probe follower's time at a thousand paths).
        self._recent: deque[tuple[int, dict]] = deque()
        self._pool: dict[tuple, PooledPath] = {}
        self._lost_in_window = 0
        self._serial = 0
        self._keys: dict[tuple, tuple[str, ...]] = {}  # a discovered path's names -> canonical link names
        self._named: dict[str | tuple[str, ...], int] = {}  # name or set -> intervals since last evidence
        self.vanished = VanishedLinks(self.switch_links)

    @classmethod
    def for_interval(cls, switch_links: dict[str, set[str]], report_s: float):
        """Window and memory in seconds: shorter intervals name a fault sooner (persistence counts
        intervals), and still pool WINDOW_S of evidence, which sparse loss needs."""
        localizer = cls(switch_links, window=max(4, round(WINDOW_S / report_s)),
                        forget_after=max(6, round(FORGET_S / report_s)))
        localizer.vanished.confirm = max(2, round(CONFIRM_S / report_s))
        return localizer

    def explain(self, paths: list[PooledPath]) -> dict[str | tuple[str, ...], tuple[str, float]]:
        raise NotImplementedError

    def named_now(self) -> set[str]:
        """Every name the verdicts in force hold: a name, or a candidate of a set."""
        return {part for name in self._named for part in (name if isinstance(name, tuple) else (name,))}

    def latest(self, paths: Iterable[PooledPath]) -> tuple[int, int]:
        """(sent, lost) over these paths in the latest interval alone: a fault that began within the
        window shows its full rate there, diluted over the whole window."""
        counts = self.latest_counts(paths)
        return sum(c[0] for c in counts), sum(c[1] for c in counts)

    def latest_counts(self, paths: Iterable[PooledPath]) -> list[tuple[int, int]]:
        """(sent, lost) of each of these paths probed in the latest interval."""
        return [p.latest[1:] for p in paths if p.latest[0] == self._serial]

    def elements(self, sample) -> tuple[str, ...]:
        """What a pooled path is made of, for `explain`: its links (canonical names) by default."""
        return self._keyed(tuple(sample.links))

    def observe(self, t: float, samples: Iterable) -> list[Verdict]:
        """Feed one interval's path samples (src, dst, sport, links, sent, lost); returns new verdicts."""
        samples = list(samples)
        self._add(samples)
        suspects = self.explain(list(self._pool.values())) if self._lost_in_window else {}
        flows = {(s.src, s.dst, s.sport): (self._keyed(tuple(s.links)), None not in s.links and s.lost < s.sent)
                 for s in samples}
        self.vanished.observe(flows, any(getattr(s, "rerouting", False) for s in samples), {s.src for s in samples})
        for name, kind in self.vanished.names().items():
            if name not in suspects and not (kind == "link_down" and any(
                    name in self.switch_links.get(other, ()) for other in suspects)):
                suspects[name] = (kind, 1.0)
        verdicts = []
        held = self.named_now()
        for name, (kind, confidence) in suspects.items():
            if name not in self._named and isinstance(name, tuple):
                if held.intersection(name):  # a link already named explains it: the set says nothing new
                    self._named[name] = 0
                    continue
                verdicts.append(Verdict(t=t, detector=self.detector, kind=kind, links=name,
                                        confidence=round(confidence, 3)))
            elif name not in self._named:
                link = name if Target.parse(name).is_link else None
                verdicts.append(Verdict(t=t, detector=self.detector, kind=kind, link=link,
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
            links = self.elements(s)
            if not links or getattr(s, "rerouting", False):  # charged to paths no longer current
                continue
            key = (s.src, s.dst, s.sport)
            # held by PFC, or toward an agent that had not reported: neither lost nor clean
            sent, lost = s.sent - getattr(s, "held", 0) - getattr(s, "unreported", 0), s.lost
            path = self._pool.get(key)
            if path is None:
                path = self._pool[key] = PooledPath(links, key=key)
            path.links = links  # the newest discovery wins
            path.sent += sent
            path.lost += lost
            if lost:
                path.lossy_intervals.add(self._serial)
            before = counts.get(key, (0, 0))
            counts[key] = (before[0] + sent, before[1] + lost)
            self._lost_in_window += lost
        for key, (sent, lost) in counts.items():
            self._pool[key].latest = (self._serial, sent, lost)
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
            keyed = self._keys[names] = tuple(link_key(link) for link in names if link)
        return keyed
