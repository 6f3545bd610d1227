"""probe-likelihood: name the lossy link(s) or switch by likelihood, from the evidence the
probe-localizer reads (per-path probe loss pooled over a window): binary network tomography
with a loss model instead of a greedy count.

Model. On a lossless fabric a healthy path loses (almost) nothing: a probe is lost with
probability HEALTHY_LOSS. Hypothesis "e is lossy", e one of hypotheses.py's causes (a link in one
direction or both, a route a switch holds toward a NIC or host, a switch, what did not answer):
every probe over e is lost with one rate r (fitted: lost / sent over the paths that cross e),
other paths stay healthy. Against "all healthy" its log-likelihood ratio is the binomial one of
e's pooled counts N sent, L lost:
    LLR(e) = L ln(r / HEALTHY_LOSS) + (N - L) ln((1 - r) / (1 - HEALTHY_LOSS))
so a link gains from the losses its paths explain and pays for the clean probes its paths
carried at that rate: a rival that shares the lossy paths but also carried many clean probes
loses, however the greedy counts tie. A switch hypothesis pools the paths over any of its links.

Naming (repeated on what is left, so faults far apart are all named):
- the most likely link, if LLR >= MIN_LLR, with at least `min_lost` losses seen in at least
  `persist` intervals (a route change's loss lasts one);
- no rival may remain: a cause sharing its lossy paths that the probes can tell apart from it
  (not over exactly the same paths; those never can be: links among them are named together,
  a set verdict, and otherwise a link is named before a switch, a switch before a route, then
  the first by name) that is within MARGIN
  (e^3, 20x) of it, or that lies on every lossy path it explains while its own clean probes do
  not rule it out (at its fitted rate they would have lost fewer than PLAUSIBLE_LOSSES). Until
  then naming waits, at most `window` intervals, for a loss that tells them apart;
- routes and switches lose all or nothing (see `weighed` below); what did not answer is never
  named, only takes the loss it explains; a link named explains its paths both ways;
- partial loss only: a link other links explain is not named, nor a rival: the links of the sparsest
  set that explains the window's paths (tomography.py's joint fit, the links already named in it)
  leave it out, as a host link on the paths of two faults; and a new link waits, as for a rival,
  while a set of links without it is about as likely (within SET_MARGIN) as the best set with it;
  a wait lasts until `window` intervals were waited, however the rivals alternate; rivals the
  evidence's own traffic can never tell apart (within one of `traffic`'s classes, transport-state's) are not
  waited for, and are named as their set when the set is likely enough;
- then links named on one switch become the switch when the switch, one hypothesis with one
  rate over all its paths, is about as likely as those links apart (within MARGIN per link
  it replaces): a switch fault shows on every one of its links at once;
- confidence: the posterior, among all candidates, of those naming the same (uniform prior); for
  a set, of those naming any of its links.
"""

from __future__ import annotations

import math
from typing import Protocol

from twin.detect import tomography
from twin.detect.hypotheses import Hypotheses, is_route, is_unknown, on_link, precedence
from twin.detect.window import PooledPath, WindowedLocalizer, loss_per_path

DETECTOR = "probe-likelihood"
HEALTHY_LOSS = 1e-5
MIN_LLR = 10.0  # e^10: 2 losses in 200 probes over a link, not 2 strays among 2000
MARGIN = math.log(20)
# A set of other links has more freedom than one rival (a rate each): it must trail by more
# (e^5, 150x) before a link on the paths of two sparse faults may be named for both.
SET_MARGIN = 5.0
DOWN_RATE = 0.95  # a link losing this share of its probes is down, not dropping
DEAD_RATE = 0.9  # a switch whose paths lose this share of their probes (window.loss_per_path) is down
PLAUSIBLE_LOSSES = 3  # a rival whose clean probes should have lost this many (P(none) ~ 5 %) is ruled out


class OwnTraffic(Protocol):
    """Evidence that is a job's own traffic (transport-state's QpEvidence), not a probe plan."""

    def ambiguous(self) -> list[list[str]]:
        """The link sets its traffic cannot tell apart."""

    def own_loss(self, key: tuple) -> bool:
        """Whether a pooled path's (src, dst, sport) loss was surely on its own way."""


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
            # partial loss, over links: routes and switches are weighed only when they lose all
            candidates = {h for p in self.paths if p.lost for h in p.links if on_link(h) or is_unknown(h)} - leave_out
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
        self.min_confidence = 0.0  # below it a name is not given (transport-state: thin evidence)
        # The traffic the evidence is (transport-state's QPs: QpEvidence), which says what it cannot
        # tell apart and whose loss was its own; None: the probes', whose rivals are told apart by
        # waiting (see `_inseparable`).
        self.traffic: OwnTraffic | None = None
        self.hypotheses = Hypotheses(set(self.switch_links))
        self._waited: dict[frozenset, int] = {}  # rivals not yet told apart -> intervals waited
        self._idle: dict[frozenset, int] = {}  # a wait -> intervals since it was last waited

    def elements(self, sample) -> tuple[str, ...]:
        """A path's hypotheses: its directed links and the routes it takes (hypotheses.py)."""
        return self.hypotheses.of_path(sample.src, tuple(sample.links), sample.dst)

    def _through(self, node: str, paths: list[PooledPath]) -> list[PooledPath]:
        mine = self.hypotheses.of_switch.get(node, set())
        return [p for p in paths if mine.intersection(p.links)]

    def explain(self, paths: list[PooledPath]) -> dict[str | tuple[str, ...], tuple[str, float]]:
        waiting: set[frozenset] = set()
        left = [p for p in paths if p.sent > 0 or p.lost]
        dead = self._still_dead(left)
        gone = {id(p) for node in dead for p in self._through(node, left)}
        left = [p for p in left if id(p) not in gone]
        # hypothesis -> kind, confidence, LLR, its paths, the links it cannot be told from (or ())
        named: dict[str, tuple[str, float, float, list, tuple]] = {}
        while sum(p.lost for p in left) >= self.min_lost:
            found = self._best(left, waiting)
            if found is None:
                break
            hypothesis, kind, confidence, score, covered, together = found
            if is_unknown(hypothesis):  # explained where nothing answered: named by nothing
                gone = {id(p) for p in covered}
                left = [p for p in left if id(p) not in gone]
                continue
            named[hypothesis] = (kind, confidence, score, covered, together)
            # A link named explains the paths over it both ways: a drop of some 5-tuples both ways
            # loses every probe of a path whose ports all hash into the drop, which a route over
            # that one path fits better than the link's partly lossy other direction.
            explained = set(together) or {self.hypotheses.name[hypothesis]}
            left = [p for p in left if not any(self.hypotheses.name[h] in explained for h in p.links)]
        # A wait is kept a window long after it was last waited: sparse loss makes the best link
        # and its rivals alternate from one interval to the next, and a wait that restarted at
        # each alternation would never end.
        self._idle = {key: 0 if key in waiting else self._idle.get(key, 0) + 1 for key in self._waited}
        self._waited = {key: n for key, n in self._waited.items() if self._idle[key] <= self.window}
        return {**self._as_names(paths, named), **dead}

    def _still_dead(self, paths: list[PooledPath]) -> dict[str, tuple[str, float]]:
        """Switches named dead that still lose (nearly) every probe crossing them keep the loss of
        their paths: where every lossy path also crosses another switch (the two leaves of a
        2-leaf fabric), the two trade first place by a probe's count from one interval to the
        next, and each change of sides would be a new verdict."""
        dead = {}
        for node in self._named:
            through = self._through(node, paths) if node in self.switch_links else []
            lost = sum(p.lost for p in through)
            if lost >= self.min_lost and loss_per_path((p.sent, p.lost) for p in through) >= DEAD_RATE:
                dead[node] = ("switch_down", 1.0)
        return dead

    def _best(self, paths: list[PooledPath], waiting: set) -> tuple | None:
        """The most likely hypothesis that nothing rivals (or whose wait for a tie-breaking loss has
        run out), as (hypothesis, kind, confidence, LLR, its paths); None while none is."""
        joint = JointFit(paths)
        covers: dict[str, list[PooledPath]] = {}
        for p in paths:
            for h in p.links:
                covers.setdefault(h, []).append(p)
        counts = {h: (sum(p.sent for p in ps), sum(p.lost for p in ps)) for h, ps in covers.items()}
        names, nodes = self.hypotheses.name, self.hypotheses.nodes
        in_force = self.named_now()

        def weighed(h: str) -> bool:
            # A route forwards or discards, a switch lives or dies: one losing part of what it
            # carries is a subset of a lossy link's paths that happens to hold its losses (a drop
            # of some 5-tuples). One named keeps its loss as it fades (the fault's clear, within
            # the window); a new one must lose all in the latest interval (over the window its
            # rate is diluted by the intervals before its onset, while links, partly lossy from
            # the start, would be named first). A switch only where none of its links explains
            # the loss alone.
            if on_link(h) or is_unknown(h) or names[h] in in_force:
                return True
            sent, lost = self.latest(covers[h])
            if not sent:
                return False
            if is_route(h):
                return lost >= DOWN_RATE * sent
            return loss_per_path(self.latest_counts(covers[h])) >= DEAD_RATE \
                and not self._one_link_explains(h, covers[h])

        score = {h: llr(*counts[h]) for h in covers if counts[h][1] and weighed(h)}
        if not score:
            return None

        # A hypothesis already named (its link or switch, itself or through its switch) keeps
        # explaining the loss while it is within MARGIN of the best: two switches or links the
        # paths cannot separate trade first place as counts move by a probe, and each change of
        # sides would be a new verdict.
        named = {h for h in covers if names[h] in in_force or nodes[h] & in_force}

        def most_likely() -> str:  # then the most likely, a link before a route, the first by name
            top = max(score.values())
            return min(score, key=lambda h: (not (h in named and score[h] > top - MARGIN), -score[h],
                                             precedence(h), h))

        path_sets: dict[str, frozenset[int]] = {}

        def paths_of(h: str) -> frozenset[int]:  # built once per hypothesis and interval
            if h not in path_sets:
                path_sets[h] = frozenset(id(p) for p in covers[h])
            return path_sets[h]

        def alike(h: str) -> set[str]:  # the hypotheses over exactly its paths: never told apart
            return {other for other in score if paths_of(other) == paths_of(h)}

        def kin(h: str) -> set[str]:  # those and the ones naming the same (a link and its directions)
            return alike(h) | {other for other in covers if names[h] and names[other] == names[h]}

        def sparse(h: str) -> bool:  # a link's partial loss, where a set of others may explain it;
            # the links of a dead switch explain each other's total loss, and are named (and
            # merged); routes and switches lose all (a lower rate is the window before onset)
            return (on_link(h) or is_unknown(h)) and counts[h][1] < DOWN_RATE * counts[h][0]

        known = frozenset(h for h in covers if names[h] in in_force)
        best = most_likely()
        while best not in named and sparse(best) and not kin(best) & joint.needed(known):
            # others (those named among them) explain its loss, as a host link on the paths of
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
            if h == best or paths_of(h) == paths_of(best) or names[h] == names[best]:
                return False  # the two directions of one link name the same link
            shares = sum(1 for p in lossy if h in p.links)
            if not shares:  # it explains other losses (the other direction of a link both lose)
                return False
            if score[h] > score[best] - MARGIN:
                return True
            on_every_lossy = shares == len(lossy)
            clean = sum(p.sent for p in covers[h] if not p.lost)
            return on_every_lossy and clean * counts[h][1] / max(1, counts[h][0]) < PLAUSIBLE_LOSSES

        rivals = frozenset(h for h in candidates if rival(h))
        # Rivals that no loss of the evidence's own traffic will ever tell apart are not waited for:
        # they are named together once the set is likely enough (`_inseparable`). Not a set of
        # other links (two faults, below): the classes say nothing of that.
        inseparable = self._inseparable(best, rivals | alike(best), lossy) if rivals else set()
        key = rivals | {best}
        if not rivals and best not in named and sparse(best):
            # a set of others about as likely (two faults whose paths share this one); its members
            # change as loss comes in: the wait is this hypothesis'
            rivals = frozenset(joint.alternative(best, kin(best), known))
            key = frozenset({best, "(another set)"})
            # ... or the switch's, when the set is of its other links (a black hole toward one
            # host: its own link, or those the other hosts reach it by, alternate as the best)
            shared = set(nodes[best]).intersection(*(nodes[h] for h in rivals))
            if len(rivals) >= 2 and shared:
                key = frozenset(shared)
        if rivals and best not in named and not inseparable:
            waiting.add(key)
            self._waited[key] = self._waited.get(key, 0) + 1
            if self._waited[key] <= self.window:
                return None
        # Links over exactly its paths: no probe of the plan tells them from it, so they are named
        # together (a set verdict), not one of them at a shared confidence.
        together = tuple(sorted({names[h] for h in alike(best) if on_link(h)})) if on_link(best) else ()
        together = together if len(together) > 1 else ()
        top = score[best]
        weights = {h: math.exp(s - top) for h, s in score.items()}  # the two ways of a link name one thing

        def posterior_of(named_as: set[str]) -> float:
            return sum(w for h, w in weights.items() if names[h] in named_as) / sum(weights.values())

        posterior = posterior_of(set(together) or {names[best]})
        if posterior < self.min_confidence and inseparable:
            together, posterior = tuple(sorted(inseparable)), posterior_of(inseparable)
        if posterior < self.min_confidence:
            return None  # a guess among rivals the evidence did not tell apart: named by nothing
        rate = lost / max(1, counts[best][0])
        kind = ("link_down" if rate >= DOWN_RATE else "silent_drop") if on_link(best) else \
            "blackhole" if is_route(best) else "switch_down"
        return best, kind, posterior, score[best], covers[best], together

    def _inseparable(self, best: str, rivals: set[str], lossy: list[PooledPath]) -> set[str]:
        """The links of `best` and its rivals when the evidence's own traffic can never tell them
        apart: the set lies within one of `traffic`'s classes (transport-state: a QP whose path is the only one
        over each of its links in their direction; its own TTL probes, one a discovery, are all
        that could separate them, and at 2 % loss they hardly ever do), and every `lossy` path lost
        on its own way (`own_loss`: a QP that only waited may have lost its ACKs on the way back,
        over links of another path: a black hole toward its source named its data path's links,
        wrong). Otherwise, or without `traffic` (the probes: their plan is chosen to tell links
        apart), the empty set."""
        names = self.hypotheses.name
        links = {names[h] for h in rivals | {best} if on_link(h)}
        if self.traffic is None or not on_link(best) or len(links) < 2 or \
                not all(self.traffic.own_loss(p.key) for p in lossy) or \
                not any(links <= set(group) for group in self.traffic.ambiguous()):
            return set()
        return links

    def _one_link_explains(self, switch: str, paths: list[PooledPath]) -> bool:
        """Is one link of the switch on every lossy path over it?"""
        lossy = [{self.hypotheses.name[h] for h in p.links if on_link(h)} for p in paths if p.lost]
        return bool(lossy) and bool(set.intersection(*lossy) & self.switch_links[switch])

    def _as_names(self, paths: list[PooledPath], named: dict) -> dict[str | tuple[str, ...], tuple[str, float]]:
        """Hypotheses -> what verdicts name: a hop its link, a route its switch, links the probes
        cannot tell apart their set; and links named on one switch become the switch when its
        single hypothesis is about as likely."""
        names = self.hypotheses.name
        out: dict[str | tuple[str, ...], tuple[str, float]] = {}
        for h, (kind, confidence, _score, _paths, together) in named.items():
            key = together or names[h]
            if key not in out or confidence > out[key][1]:
                out[key] = (kind, confidence)
        for node, links in self.switch_links.items():
            mine = [h for h in named if on_link(h) and not named[h][4] and names[h] in links]
            if len({names[h] for h in mine}) < 2:
                continue
            through = self._through(node, paths)
            sent, lost = sum(p.sent for p in through), sum(p.lost for p in through)
            apart = sum(named[h][2] for h in mine)
            if llr(sent, lost) >= apart - MARGIN * (len(mine) - 1):
                for h in mine:
                    out.pop(names[h], None)
                kind = "switch_down" if loss_per_path((p.sent, p.lost) for p in through) >= DEAD_RATE \
                    else "silent_drop"
                out[node] = (kind, max(named[h][1] for h in mine))
        return out
