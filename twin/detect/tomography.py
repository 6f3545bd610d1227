"""Joint loss model for probe tomography: which *set* of lossy links explains the paths best.

The per-link likelihood ratio (likelihood.py) scores each link alone on the paths that cross it,
so a link on the paths of two faults (a host link both faults' paths lead to) collects the loss
of both and outscores each. Here the links of a set lose at once, as a noisy OR: a probe over
path p is lost with probability
    q_p = 1 - (1 - HEALTHY_LOSS) * prod over lossy links e on p of (1 - r_e)
with each r_e fitted by expectation-maximisation, and a set is kept only as large as the
evidence needs: a link joins when it adds at least `min_gain` to the log-likelihood, and leaves
when the others explain its loss within `min_gain` (stepwise selection, as in NetBouncer's and
binary tomography's sparse fits).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

HEALTHY_LOSS = 1e-5
MAX_RATE = 1 - 1e-9  # a rate of exactly 1 would make one clean probe impossible (log 0)
ITERATIONS = 25


def log_keep(links: Iterable[str], rates: dict[str, float]) -> float:
    """ln(1 - q_p): in logs, as several links near rate 1 would round 1 - q_p to 0."""
    return math.log1p(-HEALTHY_LOSS) + sum(math.log1p(-rates[link]) for link in links if rates.get(link))


def loss_probability(links: Iterable[str], rates: dict[str, float]) -> float:
    return -math.expm1(log_keep(links, rates))


def log_likelihood(paths: Sequence, rates: dict[str, float]) -> float:
    """Of the paths' counts (sent, lost) under `rates`, relative to every link healthy."""
    total = 0.0
    healthy = math.log(HEALTHY_LOSS), math.log1p(-HEALTHY_LOSS)
    for p in paths:
        keep = log_keep(p.links, rates)
        total += p.lost * (math.log(-math.expm1(keep)) - healthy[0]) + (p.sent - p.lost) * (keep - healthy[1])
    return total


def fit(paths: Sequence, links: Iterable[str], fixed: dict[str, float] | None = None) -> dict[str, float]:
    """Loss rates of `links` (others in `fixed` held), by EM for the noisy OR: a lost probe is
    charged to each lossy link of its path in proportion r_e / q_p."""
    links = set(links)
    rates = dict(fixed or {})
    sent = dict.fromkeys(links, 0)
    lost = dict.fromkeys(links, 0)
    lossy = []  # only lost probes are charged; clean ones count in `sent`
    for p in paths:
        mine = [e for e in p.links if e in links]
        for e in mine:
            sent[e] += p.sent
            lost[e] += p.lost
        if p.lost and mine:
            lossy.append((p.lost, mine, [e for e in p.links if e in rates and e not in links]))
    rates.update({e: min(MAX_RATE, lost[e] / sent[e]) if sent[e] > 0 else 0.0 for e in links})
    for _ in range(ITERATIONS):
        charged = dict.fromkeys(links, 0.0)
        for count, mine, held in lossy:
            q = max(loss_probability(mine + held, rates), 1e-300)
            for e in mine:
                charged[e] += count * rates[e] / q
        change = 0.0
        for e in links:
            rate = min(MAX_RATE, charged[e] / sent[e]) if sent[e] > 0 else 0.0
            change, rates[e] = max(change, abs(rate - rates[e])), rate
        if change < 1e-7:
            break
    return {e: rates[e] for e in links}


@dataclass
class Selection:
    rates: dict[str, float]  # the links kept, with their fitted loss rates
    dropped: set[str]  # joined, then explained by the others
    score: float  # log-likelihood against all healthy, less `min_gain` per link kept


def select(paths: Sequence, candidates: Iterable[str], min_gain: float, keep: Iterable[str] = (),
           start: Iterable[str] = (), max_links: int = 8) -> Selection:
    """Stepwise selection of the sparsest set of lossy links that explains the paths: a link joins
    while it adds at least `min_gain` to the log-likelihood, and leaves when the others explain its
    loss within `min_gain`. Links in `keep` are in from the start and never leave; links in `start`
    are in from the start and may leave."""
    keep = set(keep)
    first = keep | set(start)
    candidates = set(candidates) | first
    crossing: dict[str, list] = {e: [] for e in candidates}
    for p in paths:
        for e in p.links:
            if e in crossing:
                crossing[e].append(p)
    chosen = fit(_over(paths, first), first) if first else {}
    gains: dict[str, float] = {}  # a candidate's gain changes only when a link on its paths joins
    stale = {e for e in candidates - first if any(p.lost for p in crossing[e])}
    while len(chosen) < max_links:
        for e in stale:
            if chosen:
                rate = fit(crossing[e], [e], chosen)[e]
            else:  # alone, its pooled rate
                rate = min(MAX_RATE, sum(p.lost for p in crossing[e]) / max(1, sum(p.sent for p in crossing[e])))
            gains[e] = log_likelihood(crossing[e], {**chosen, e: rate}) - log_likelihood(crossing[e], chosen)
        best = max(sorted(gains), key=gains.get, default=None)
        if best is None or gains[best] < min_gain:
            break
        del gains[best]
        chosen = fit(_over(paths, [*chosen, best]), [*chosen, best])
        # every chosen rate may have moved: candidates sharing a path with any chosen link
        near = {e for p in _over(paths, chosen) for e in p.links}
        stale = {e for e in gains if e in near}
    dropped: set[str] = set()
    while chosen:
        over = _over(paths, chosen)
        whole = log_likelihood(over, chosen)
        worst, worst_loss = None, min_gain
        for e in sorted(set(chosen) - keep):
            rest = fit(over, [k for k in chosen if k != e])
            loss = whole - log_likelihood(over, rest)
            if loss < worst_loss:
                worst, worst_loss = e, loss
        if worst is None:
            break
        dropped.add(worst)
        chosen = fit(over, [k for k in chosen if k != worst])
    score = log_likelihood(_over(paths, chosen), chosen) - min_gain * len(chosen)
    return Selection(chosen, dropped, score)


def _over(paths: Sequence, links: Iterable[str]) -> list:
    links = set(links)
    return [p for p in paths if links.intersection(p.links)]
