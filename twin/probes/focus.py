"""Focus: probe harder where probes were lost (cover mesh).

The cover mesh probes every link direction at one pace, over a few paths each: a 3 % one-way drop
on a link that four probed paths cross loses about one probe a second, and naming the link takes
several losses on paths that tell it from the links beside it. At the mesh's pace that took 3-7 s
(docs/benchmarks.md, one-way loss). So when an interval's flow loses probes, the mesh probes,
`times` times an interval for `hold_s`:
- the flows that lost (their loss comes `times` as fast), and
- for every directed link of their paths (the suspects), up to PER_SUSPECT discovered flows that
  cross it and as few other suspects as possible, probed or not: a flow over one suspect alone
  loses only if that suspect is the lossy one. More probes on the selected flows over the path
  would not do it: a host link's three probed paths all crossed one uplink too, and the localizers
  waited on the uplink as long with four times the probes (2.1-3.4 s against 1.7-2.5 s, rail4).
The other flows keep their pace. Eight times: a rival link that shares the lossy paths is ruled out
only by the clean probes of the flows over it alone, and at a 3 % drop a hundred or more (at 4, a
spine-superspine drill waited 4 s on the leaf-spine link its lossy paths shared).

The extra probes are bounded twice: at most a quarter of the selected flows' count are focused at
once (SHARE; MIN_FLOWS on a small lab: a lossy path's suspects need a few each), and never so many
that the mesh would send more than its `max_pps`.
"""

from __future__ import annotations

from collections.abc import Iterable

from twin.probes.cover import Hop

Flow = tuple[str, str, int]
TIMES = 8  # the default pace of a focused flow, in probes an interval (4: docs/benchmarks.md, one-way loss)
HOLD_S = 2.0  # the localizers' evidence window (detect/window.py WINDOW_S): focused that long after a loss
SHARE = 0.25
MIN_FLOWS = 8
PER_SUSPECT = 2


class Focus:
    def __init__(self, times: int, budget: int, hold_s: float = HOLD_S):
        self.times, self.budget, self.hold_s = times, budget, hold_s
        self.until: dict[Flow, float] = {}  # focused flow -> until when (monotonic)
        self.triggers = 0  # losses seen (a counted interval's, a missed echo) that set a focus (the run's report)

    @staticmethod
    def budget_for(flows: int, times: int, interval_ms: int, base_pps: float, max_pps: int | None) -> int:
        """How many flows may be focused at once: SHARE of the selection, within max_pps (None: no bound)."""
        if times <= 1:
            return 0
        extra_each = times * 1000 / interval_ms  # a focused flow may be one not probed before
        share = max(MIN_FLOWS, int(SHARE * flows))
        return share if max_pps is None else max(0, min(share, int((max_pps - base_pps) // extra_each)))

    def observe(self, now: float, lossy: Iterable[Flow], hops: dict[Flow, tuple[Hop, ...]],
                crossing: dict[Hop, list[Flow]]) -> bool:
        """Focus on the flows that lost probes in an interval and on flows that separate the links
        of their paths (`crossing`: every discovered flow over each hop); let go of flows held past
        their time. True when the focused set changed."""
        before = set(self.until)
        self.until = {flow: until for flow, until in self.until.items() if until > now}
        lost = sorted(flow for flow in set(lossy) if flow in hops)
        suspect_set = {hop for flow in lost for hop in hops[flow]}
        suspects = sorted(suspect_set)
        if suspects and self.budget:
            self.triggers += 1
            chosen = dict.fromkeys(lost)
            apart = {hop: iter(sorted(crossing.get(hop, ()),
                                      key=lambda flow: (len(suspect_set.intersection(hops[flow])), flow)))
                     for hop in suspects}
            for _turn in range(PER_SUSPECT):  # one for every suspect, then a second: all get some
                for hop in suspects:
                    flow = next((f for f in apart[hop] if f not in chosen), None)
                    if flow is not None:
                        chosen[flow] = None
            for flow in list(chosen)[:self.budget]:
                self.until[flow] = now + self.hold_s
            if len(self.until) > self.budget:  # the newest suspicion first
                keep = sorted(self.until, key=lambda flow: -self.until[flow])[:self.budget]
                self.until = {flow: self.until[flow] for flow in keep}
        return set(self.until) != before

    def times_of(self, flow: Flow) -> int:
        return self.times if flow in self.until else 1

    def focused(self) -> list[Flow]:
        return sorted(self.until)
