"""PFC-like pausing of a port's egress, shared by pfc_pause and pfc_storm.

While a fault is active a TBF gate sits under the port's HTB data class, open (far above the
line rate; HTB still shapes). Pausing turns the gate's rate down to a trickle: TBF sends a packet
only when it has the tokens for it, so the queue holds and nothing runs up a debt. Resuming
turns it back up, which refills its bucket. (Turning HTB's own class rate down instead let the
first jumbo frame through at the trickle rate and charged the class 9 s of tokens: after every
pause the port stalled for seconds. Light flows of small packets never showed it, a TCP
collective did.)
"""

from __future__ import annotations

import time

from pyroute2 import IPRoute

from .. import shaping
from .base import FaultContext

GATE = 0x200000  # 20: the TBF under class 1:10 while the fault is active
OPEN_RATE_BPS = 10_000_000_000
OPEN_BURST = 256 * 1024  # larger than a GSO super-packet, which TBF would otherwise split
PAUSE_RATE_BPS = 8_000  # TBF needs a positive rate: 1 kB/s holds a 200 Mbit/s link to nothing
FRAME_OVERHEAD = 64  # link-layer bytes over the MTU that TBF counts
HOLD_BYTES = 64 * 1024 * 1024  # the queue behind a paused port
DRAIN_TIMEOUT_S = 10.0
SETTLED_S = 0.3


class Ports:
    """Open netlink handles to the nodes whose ports a fault pauses."""

    def __init__(self, ctx: FaultContext):
        self.ctx = ctx
        self._handles: dict[str, IPRoute] = {}
        self._index: dict[tuple[str, str], int] = {}

    def ipr(self, node: str) -> IPRoute:
        if node not in self._handles:
            self._handles[node] = IPRoute(netns=self.ctx.runtime.netns_path(node), flags=0)
        return self._handles[node]

    def index(self, node: str, ifname: str) -> int:
        if (node, ifname) not in self._index:
            self._index[(node, ifname)] = self.ipr(node).link_lookup(ifname=ifname)[0]
        return self._index[(node, ifname)]

    def _gate(self, node: str, ifname: str, command: str, rate_bps: int, burst: int) -> None:
        self.ipr(node).tc(command, "tbf", self.index(node, ifname), handle=GATE, parent=shaping.CLASS_HANDLE,
                          rate=f"{rate_bps}bit", burst=burst, limit=HOLD_BYTES)

    def add_gate(self, node: str, ifname: str) -> None:
        self._gate(node, ifname, "add", OPEN_RATE_BPS, OPEN_BURST)

    def pause(self, node: str, ifname: str) -> None:
        # TBF refills its bucket on every change, so one bucket passes as the pause takes hold
        # (like frames already sent when a pause frame arrives); it must hold a whole frame, or
        # TBF would drop larger frames: one frame of the lab's MTU.
        self._gate(node, ifname, "change", PAUSE_RATE_BPS, self.ctx.fabric.mtu + FRAME_OVERHEAD)

    def resume(self, node: str, ifname: str) -> None:
        self._gate(node, ifname, "change", OPEN_RATE_BPS, OPEN_BURST)

    def has_gate(self, node: str, ifname: str) -> bool:
        return any(q["handle"] == GATE for q in self.ipr(node).get_qdiscs(index=self.index(node, ifname)))

    def backlog_bytes(self, node: str, ifname: str) -> int:
        for qdisc in self.ipr(node).get_qdiscs(index=self.index(node, ifname)):
            if qdisc["handle"] == GATE:
                return qdisc.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["backlog"]
        return 0

    def remove_gate(self, node: str, ifname: str) -> None:
        """Open the gate, let the held packets leave, then remove it. Removing drops what is still
        queued, so wait for an empty queue; under steady bulk traffic it is never empty, so also
        accept a queue that has stayed below OPEN_BURST (what the port queues anyway) for
        SETTLED_S: the held packets are gone, and TCP recovers the few dropped."""
        self.resume(node, ifname)
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        low_since = None
        while time.monotonic() < deadline:
            backlog = self.backlog_bytes(node, ifname)
            if backlog == 0:
                break
            low_since = (low_since or time.monotonic()) if backlog < OPEN_BURST else None
            if low_since is not None and time.monotonic() - low_since >= SETTLED_S:
                break
            time.sleep(0.01)
        self._gate(node, ifname, "del", OPEN_RATE_BPS, OPEN_BURST)  # pyroute2 wants tbf's keys even here

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
