"""Which faults cannot be active at once: two on one link or node, and a node fault with a fault
on one of that node's links (a switch_down takes its links down; a link_down cleared under it
would bring one back up, and neither clear could restore the state the other found).

Checked where a scenario loads (every pair of faults, by a sweep per target: n log n, not every
pair; 300 faults on one link once took 13.5 s and printed 44,850 problems) and where a fault is
injected by hand (against the active ones).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from twin.model.fabric import Fabric, link_key


@dataclass(frozen=True)
class Span:
    """One fault's place on the timeline and what it touches."""

    id: str
    start_s: float
    end_s: float
    targets: tuple[str, ...]  # link keys 'a -- b' or node names


def _places(fabric: Fabric, targets: tuple[str, ...]) -> list[tuple[str, bool]]:
    """(place, owned): its own targets, and, for a node, each of its links as a place it is near."""
    places = [(target, True) for target in targets]
    for target in targets:
        if target in fabric.nodes:
            places += [(link_key(link.name), False) for link in fabric.links_of(target)]
    return places


def clashes(fabric: Fabric, spans: list[Span]) -> list[tuple[Span, Span, str]]:
    """(later, earlier, place) for every fault that starts while another one it clashes with is
    active; each fault is reported once (against the first clash found)."""
    by_place: dict[str, list[tuple[Span, bool]]] = defaultdict(list)
    for span in spans:
        for place, owned in _places(fabric, span.targets):
            by_place[place].append((span, owned))
    found: dict[str, tuple[Span, Span, str]] = {}
    for place, entries in by_place.items():
        entries.sort(key=lambda e: (e[0].start_s, e[0].id))
        latest: dict[bool, Span | None] = {True: None, False: None}  # the longest-running so far, per kind
        for span, owned in entries:
            # Two faults near the same link (switch_down on both its ends) do not clash.
            rivals = [latest[True], latest[False]] if owned else [latest[True]]
            rival = next((r for r in rivals if r is not None and r.end_s > span.start_s and r.id != span.id), None)
            if rival is not None and span.id not in found:
                found[span.id] = (span, rival, place)
            current = latest[owned]
            if current is None or span.end_s > current.end_s:
                latest[owned] = span
    return sorted(found.values(), key=lambda c: (c[0].start_s, c[0].id))


def clash_with_active(fabric: Fabric, new: tuple[str, ...], active: tuple[str, ...]) -> set[str]:
    """The places where a fault about to be injected meets an active one (empty: no clash)."""
    mine, theirs = dict(_places(fabric, new)), dict(_places(fabric, active))
    return {place for place in mine.keys() & theirs.keys() if mine[place] or theirs[place]}
