"""Routing transitions and the probe mesh's paths: an interval of probes is evidence about the
links it is charged to only when the paths it is charged to were current.

When routes change (a BGP session or a BFD peer changes state, a host prefix's route moves), the
probes take their new paths at once, but the mesh learns them only when every agent has
rediscovered: the runner asks for that once the changes have been quiet for a moment, and a
discovery is a round of TTL probes. Until then an interval's losses are charged to the paths
discovered before the change, over links the packets may no longer cross (a switch coming back
takes traffic before its routes are complete; a link BFD took out still carries the old paths'
names). Such intervals are `rerouting`: the localizers set them aside, the reports still count
their probes. A fault that moves routes (a link or switch down) loses probes before its BFD
detection time has passed, so it is seen before the transition it causes.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from dataclasses import dataclass

MAX_S = 5.0  # after the last change of a transition: an agent that never rediscovers blanks no more


@dataclass
class Transition:
    first: float  # CLOCK_MONOTONIC of its first and latest route change
    last: float


class Transitions:
    """Route changes, the rediscoveries asked for, and the agents' discovered paths, in time."""

    def __init__(self) -> None:
        self._transitions: list[Transition] = []
        self._refreshes: list[float] = []
        self._selections: list[float] = []  # cover: when the mesh selected its flows
        self._discoveries: dict[str, list[float]] = {}  # host -> when its agent published paths
        self._lock = threading.Lock()  # changes come from the event thread, reads from the follower

    def changed(self, t: float) -> None:
        """Routes changed at `t`: one transition until the next rediscovery is asked for."""
        with self._lock:
            current = self._transitions[-1] if self._transitions else None
            if current is not None and not (self._refreshes and self._refreshes[-1] > current.first):
                current.last = max(current.last, t)
            else:
                self._transitions.append(Transition(t, t))

    def refreshed(self, t: float) -> None:
        with self._lock:
            self._refreshes.append(t)

    def selected(self, t: float) -> None:
        with self._lock:
            self._selections.append(t)

    def discovered(self, host: str, t: float) -> None:
        with self._lock:
            times = self._discoveries.setdefault(host, [])
            if not times or t > times[-1]:
                times.append(t)

    def changed_after(self, t: float) -> bool:
        """Did routes change after `t`?"""
        with self._lock:
            return bool(self._transitions) and self._transitions[-1].last > t

    def settled(self, transition: Transition) -> float:
        """When every agent had published paths discovered after the rediscovery asked for once the
        transition was over, and (cover) the mesh had selected its flows from them: until then
        the probed flows are the old selection's, and a link only flows that died crossed is not
        probed yet, not gone (at most MAX_S after its last change)."""
        cap = transition.last + MAX_S
        after = bisect_right(self._refreshes, transition.last)
        if after == len(self._refreshes):
            return cap
        refresh, latest = self._refreshes[after], 0.0
        for times in self._discoveries.values():
            found = bisect_right(times, refresh)
            if found == len(times):
                return cap
            latest = max(latest, times[found])
        if self._selections:
            chosen = bisect_right(self._selections, latest)
            if chosen == len(self._selections):
                return cap
            latest = self._selections[chosen]
        return min(latest, cap)

    def rerouting(self, start: float, end: float) -> bool:
        """Did the interval [start, end) overlap a transition (its first change to settled)?"""
        with self._lock:
            for transition in reversed(self._transitions):
                if transition.first >= end:
                    continue
                if transition.last + MAX_S <= start:
                    return False  # older ones settled earlier still
                if self.settled(transition) > start:
                    return True
            return False
