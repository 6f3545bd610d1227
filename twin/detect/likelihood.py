"""probe-likelihood: name the lossy link(s) or switch by likelihood, from the evidence the
probe-localizer reads (per-path probe loss pooled over a window): binary network tomography
with a loss model instead of a greedy count.

Model. On a lossless fabric a healthy path loses (almost) nothing: a probe is lost with
probability HEALTHY_LOSS. Hypothesis "link e is lossy": every probe over e is lost with one rate
r (fitted: lost / sent over the paths that cross e), other paths stay healthy. Against "all
healthy" its log-likelihood ratio is the binomial one of e's pooled counts N sent, L lost:
    LLR(e) = L ln(r / HEALTHY_LOSS) + (N - L) ln((1 - r) / (1 - HEALTHY_LOSS))
so a link gains from the losses its paths explain and pays for the clean probes its paths
carried at that rate: a rival that shares the lossy paths but also carried many clean probes
loses, however the greedy counts tie. A switch hypothesis pools the paths over any of its links.

Naming (repeated on what is left, so faults far apart are all named):
- the most likely link, if LLR >= MIN_LLR, with at least `min_lost` losses seen in at least
  `persist` intervals (a route change's loss lasts one);
- no rival may remain: a link the probes can tell apart from it (not over exactly the same
  paths; those never can be: the first by name is named, the confidence shared) that is within
  MARGIN (e^3, 20x) of it, or that lies on every lossy path it explains while its own clean
  probes do not rule it out (at its fitted rate they would have lost fewer than
  PLAUSIBLE_LOSSES). Until then naming waits, at most `window` intervals, for a loss that tells
  them apart;
- partial loss only: a link other links explain is not named, nor a rival: the links of the sparsest
  set that explains the window's paths (tomography.py's joint fit, the links already named in it)
  leave it out, as a host link on the paths of two faults; and a new link waits, as for a rival,
  while a set of links without it is about as likely (within SET_MARGIN) as the best set with it;
  a wait lasts until `window` intervals were waited, however the rivals alternate;
- then links named on one switch become the switch when the switch, one hypothesis with one
  rate over all its paths, is about as likely as those links apart (within MARGIN per link
  it replaces): a switch fault shows on every one of its links at once;
- confidence: the hypothesis' posterior among all candidates (uniform prior).
"""

from __future__ import annotations

import math

from twin.detect import tomography
from twin.detect.window import PooledPath, WindowedLocalizer

DETECTOR = "probe-likelihood"
HEALTHY_LOSS = 1e-5
MIN_LLR = 10.0  # e^10: 2 losses in 200 probes over a link, not 2 strays among 2000
MARGIN = math.log(20)
# A set of other links has more freedom than one rival (a rate each): it must trail by more
# (e^5, 150x) before a link on the paths of two sparse faults may be named for both.
SET_MARGIN = 5.0
DOWN_RATE = 0.95  # a link losing this share of its probes is down, not dropping
DEAD_RATE = 0.9  # a switch losing this share of the probes crossing it is down
PLAUSIBLE_LOSSES = 3  # a rival whose clean probes should have lost this many (P(none) ~ 5 %) is ruled out


def llr(sent: int, lost: int) -> float:
    """Log-likelihood ratio of 'lossy at the fitted rate' against 'healthy' for pooled counts."""
    if lost <= 0 or sent <= 0:
        return 0.0
    rate = min(lost / sent, 1.0)
    clean = (sent - lost) * math.log((1 - rate) / (1 - HEALTHY_LOSS)) if rate < 1 else 0.0
    return lost * math.log(rate / HEALTHY_LOSS) + clean


class JointFit:
    """Sets of links fitted together on the paths left to explain (tomography.select), each once,
    and only when a new name depends on them."""

    def __init__(self, paths: list[PooledPath]):
        self.paths = paths
        self._fits: dict[tuple, tomography.Selection] = {}

    def _select(self, keep: frozenset = frozenset(), start: frozenset = frozenset(),
                leave_out: frozenset = frozenset()) -> tomography.Selection:
        if (keep, start, leave_out) not in self._fits:
            candidates = {link for p in self.paths if p.lost for link in p.links} - leave_out
            self._fits[keep, start, leave_out] = tomography.select(self.paths, candidates, MIN_LLR, keep,
                                                                   start - leave_out)
        return self._fits[keep, start, leave_out]

    def needed(self, known: frozenset) -> set[str]:
        """The links of the best set, the links already named (`known`) in it from the start (and
        out again if the others explain them): a link left out is one whose loss the others explain."""
        return set(self._select(start=known).rates)

    def alternative(self, link: str, alike: set[str], known: frozenset) -> set[str]:
        """The links of the best explanation without `link` (nor the links over its very paths),
        when that explanation is about as likely (within SET_MARGIN) as the best with it; else none."""
        with_it = self._select(keep=frozenset({link}), start=known)
        without = self._select(start=known, leave_out=frozenset(alike | {link}))
        return set(without.rates) if without.score >= with_it.score - SET_MARGIN else set()


class LikelihoodLocalizer(WindowedLocalizer):
    detector = DETECTOR

    def __init__(self, switch_links: dict[str, set[str]] | None = None, window: int = 4, min_lost: int = 2,
                 persist: int = 2, forget_after: int = 6):
        super().__init__(switch_links, window, forget_after)
        self.min_lost, self.persist = min_lost, persist
        self._waited: dict[frozenset, int] = {}  # rivals not yet told apart -> intervals waited
        self._idle: dict[frozenset, int] = {}  # a wait -> intervals since it was last waited

    def explain(self, paths: list[PooledPath]) -> dict[str, tuple[str, float]]:
        waiting: set[frozenset] = set()
        left = [p for p in paths if p.sent > 0 or p.lost]
        dead = self._still_dead(left)
        left = [p for p in left if not any(self.switch_links[node].intersection(p.links) for node in dead)]
        named: dict[str, tuple[str, float, float, list]] = {}  # link -> kind, confidence, LLR, its paths
        while sum(p.lost for p in left) >= self.min_lost:
            found = self._best_link(left, waiting)
            if found is None:
                break
            link, kind, confidence, score, covered = found
            named[link] = (kind, confidence, score, covered)
            gone = {id(p) for p in covered}
            left = [p for p in left if id(p) not in gone]
        # A wait is kept a window long after it was last waited: sparse loss makes the best link
        # and its rivals alternate from one interval to the next, and a wait that restarted at
        # each alternation would never end.
        self._idle = {key: 0 if key in waiting else self._idle.get(key, 0) + 1 for key in self._waited}
        self._waited = {key: n for key, n in self._waited.items() if self._idle[key] <= self.window}
        return {**self._as_switches(paths, named), **dead}

    def _still_dead(self, paths: list[PooledPath]) -> dict[str, tuple[str, float]]:
        """Switches named dead that still lose (nearly) every probe crossing them keep the loss of
        their paths: where every lossy path also crosses another switch (the two leaves of a
        2-leaf fabric), the two trade first place by a probe's count from one interval to the
        next, and each change of sides would be a new verdict."""
        dead = {}
        for node in self._named:
            links = self.switch_links.get(node)
            through = [p for p in paths if links and links.intersection(p.links)]
            sent, lost = sum(p.sent for p in through), sum(p.lost for p in through)
            if lost >= max(self.min_lost, DEAD_RATE * sent):
                dead[node] = ("switch_down", 1.0)
        return dead

    def _best_link(self, paths: list[PooledPath], waiting: set) -> tuple | None:
        joint = JointFit(paths)
        covers: dict[str, list[PooledPath]] = {}
        for p in paths:
            for link in p.links:
                covers.setdefault(link, []).append(p)
        counts = {h: (sum(p.sent for p in ps), sum(p.lost for p in ps)) for h, ps in covers.items()}
        score = {h: llr(*counts[h]) for h in covers if counts[h][1]}
        if not score:
            return None

        # A link already named (itself or through its switch) keeps explaining the loss while it is
        # within MARGIN of the best: two switches or links the paths cannot separate trade first
        # place as counts move by a probe, and each change of sides would be a new verdict.
        named = set(self._named).union(*(self.switch_links.get(n, ()) for n in self._named))

        def most_likely() -> str:  # then the most likely, then the first by name
            top = max(score.values())
            return min(score, key=lambda h: (not (h in named and score[h] > top - MARGIN), -score[h], h))

        path_sets: dict[str, frozenset[int]] = {}

        def paths_of(link: str) -> frozenset[int]:  # built once per link and interval
            if link not in path_sets:
                path_sets[link] = frozenset(id(p) for p in covers[link])
            return path_sets[link]

        def alike(link: str) -> set[str]:  # the links over exactly its paths: never told apart
            return {h for h in score if paths_of(h) == paths_of(link)}

        def sparse(link: str) -> bool:  # partial loss, where a set of other links may explain it;
            # the links of a dead switch explain each other's total loss, and are named (and merged)
            return counts[link][1] < DOWN_RATE * counts[link][0]

        known = frozenset(h for h in self._named if h in covers)
        best = most_likely()
        while best not in named and sparse(best) and not alike(best) & joint.needed(known):
            # other links (those named among them) explain its loss, as a host link on the paths of
            # two faults: neither named nor a rival
            del score[best]
            if not score:
                return None
            best = most_likely()
        candidates = set(score)
        lossy = [p for p in covers[best] if p.lost]
        lost = counts[best][1]
        if score[best] < MIN_LLR or lost < self.min_lost or \
                len(set().union(*(p.lossy_intervals for p in lossy))) < self.persist:
            return None
        def rival(h: str) -> bool:
            if h == best or paths_of(h) == paths_of(best):
                return False
            if score[h] > score[best] - MARGIN:
                return True
            on_every_lossy = all(h in p.links for p in lossy)
            clean = sum(p.sent for p in covers[h] if not p.lost)
            return on_every_lossy and clean * counts[h][1] / max(1, counts[h][0]) < PLAUSIBLE_LOSSES

        rivals = frozenset(h for h in candidates if rival(h))
        key = rivals | {best}
        if not rivals and best not in named and sparse(best):
            # a set of other links about as likely (two faults whose paths share this one); its
            # members change as loss comes in: the wait is this link's
            rivals = frozenset(joint.alternative(best, alike(best), known))
            key = frozenset({best, "(another set)"})
            # ... or the switch's, when the set is of its other links (a black hole toward one
            # host: its own link, or those the other hosts reach it by, alternate as the best)
            shared = set(best.split(" -- ")).intersection(*(h.split(" -- ") for h in rivals)) & set(self.switch_links)
            if len(rivals) >= 2 and shared:
                key = frozenset(shared)
        if rivals and best not in named:
            waiting.add(key)
            self._waited[key] = self._waited.get(key, 0) + 1
            if self._waited[key] <= self.window:
                return None
        top = score[best]
        posterior = 1.0 / sum(math.exp(s - top) for s in score.values())
        rate = lost / max(1, counts[best][0])
        return best, "link_down" if rate >= DOWN_RATE else "silent_drop", posterior, score[best], covers[best]

    def _as_switches(self, paths: list[PooledPath], named: dict) -> dict[str, tuple[str, float]]:
        """Links named on one switch -> the switch, when its single hypothesis is about as likely."""
        out = {link: (kind, confidence) for link, (kind, confidence, _score, _paths) in named.items()}
        for node, links in self.switch_links.items():
            mine = [link for link in named if link in links]
            if len(mine) < 2:
                continue
            through = [p for p in paths if links.intersection(p.links)]
            sent, lost = sum(p.sent for p in through), sum(p.lost for p in through)
            apart = sum(named[link][2] for link in mine)
            if llr(sent, lost) >= apart - MARGIN * (len(mine) - 1):
                for link in mine:
                    out.pop(link, None)
                kind = "switch_down" if lost >= DEAD_RATE * sent else "silent_drop"
                out[node] = (kind, max(named[link][1] for link in mine))
        return out
