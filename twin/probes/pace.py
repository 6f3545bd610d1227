"""Pace: probe the selected flows over thinly crossed link directions more than once an interval.

The cover selection crosses every directed link with `paths_per_link` distinct probed paths, the
fewest flows that do it; many directions end up with just that many (rail4: 4 of 96 with three, 22
with four). At one probe a flow per 100 ms interval, a direction three flows cross carries 30 probes
a second, and a 3 % drop there loses its first probe after 1.1 s on average and none in the first
2 s one time in six (docs/benchmarks.md, one-way loss: the slowest drills waited 2.3-3 s for it).
Only after a first loss can the mesh focus (probes/focus.py). So the mesh probes a few selected
flows twice or more an interval until every direction carries at least `min_link_pps`: the flows
that cross the most directions still short, one more probe an interval at a time (lazy greedy:
a flow's gain only shrinks as directions fill). More distinct paths would cost more: a selection
crossing every direction six times is 141 flows on rail4, against 97 flows plus 30 paced probes.
Measured with it (rail4, 24 one-way drills at 3 %): the first lossy interval ended 0.84 s after onset
(median), against 2.3-3 s on the thin directions without.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter

from twin.probes.cover import Hop

Flow = tuple[str, str, int]
MIN_LINK_PPS = 60  # twice the 30 probes/s of a direction three flows cross at 100 ms
# A slow interval is a choice of fewer probes: pacing never asks a direction for more than this many
# times paths_per_link an interval (at 1 s, 6 probes rather than 60), so the mesh costs at most
# what the floor at 100 ms costs (rail4 +31 %, rail8 +47 %, pod64 +50 %).
MOST_PATHS_TIMES = 2


def floor_per_interval(min_link_pps: int, interval_ms: int, paths_per_link: int) -> int:
    """Probes each direction needs an interval to carry `min_link_pps`, within MOST_PATHS_TIMES
    paths_per_link (0: no pacing)."""
    return min(math.ceil(min_link_pps * interval_ms / 1000), MOST_PATHS_TIMES * paths_per_link)


def paces(flows: list[Flow], paths: dict[Flow, tuple[Hop, ...]], floor: int) -> dict[Flow, int]:
    """The flows probed more than once an interval, and how many times, so that every direction
    the flows cross carries at least `floor` probes an interval. A direction fewer flows cross than
    that is raised by its flows alone (one flow: `floor` times)."""
    if floor <= 0:
        return {}
    count = Counter(hop for flow in flows for hop in set(paths[flow]))
    times: dict[Flow, int] = {}
    heap = [(-gain, flow) for flow in flows if (gain := sum(1 for hop in set(paths[flow]) if count[hop] < floor))]
    heapq.heapify(heap)
    while heap:
        stale_gain, flow = heapq.heappop(heap)
        gain = sum(1 for hop in set(paths[flow]) if count[hop] < floor)
        if gain == 0:
            continue
        if gain != -stale_gain:
            heapq.heappush(heap, (-gain, flow))
            continue
        times[flow] = times.get(flow, 1) + 1
        count.update(set(paths[flow]))
        heapq.heappush(heap, (-gain, flow))  # re-checked when it comes to the top again
    return times


def extra_probes(times: dict[Flow, int]) -> int:
    """Probes an interval the paces add to the selection's one a flow."""
    return sum(t - 1 for t in times.values())
