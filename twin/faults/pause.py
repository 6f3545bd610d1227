"""PFC-like pausing of a port's egress, shared by pfc_pause and pfc_storm.

A paused port keeps its packets: a deep FIFO sits under the HTB class while the fault is
active and the class rate drops to a trickle; resuming restores the recorded rate. Handles
are kept open per node, since a controller reads backlogs every few milliseconds.
"""

from __future__ import annotations

import time

from pyroute2 import IPRoute

from .. import shaping
from .base import FaultContext

PAUSE_RATE_BPS = 8_000  # HTB needs a positive rate; 1 kB/s holds a 200 Mbit/s link to nothing
HOLD_QUEUE = 0x200000  # 20: the deep FIFO under class 1:10 while the fault is active
HOLD_PACKETS = 100_000
DRAIN_TIMEOUT_S = 10.0


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

    def rate(self, node: str, ifname: str) -> int:
        return shaping.shaped_rate_bps(self.ipr(node), self.index(node, ifname))

    def set_rate(self, node: str, ifname: str, rate_bps: int) -> None:
        shaping.set_class_rate(self.ipr(node), self.index(node, ifname), rate_bps)

    def add_hold_queue(self, node: str, ifname: str) -> None:
        self.ipr(node).tc("add", "pfifo", self.index(node, ifname), handle=HOLD_QUEUE,
                          parent=shaping.CLASS_HANDLE, limit=HOLD_PACKETS)

    def backlog_bytes(self, node: str, ifname: str) -> int:
        for qdisc in self.ipr(node).get_qdiscs(index=self.index(node, ifname)):
            if qdisc["handle"] == HOLD_QUEUE:
                return qdisc.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["backlog"]
        return 0

    def remove_hold_queue(self, node: str, ifname: str) -> None:
        """Wait for held packets to leave (removing the FIFO drops them), then remove it."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while self.backlog_bytes(node, ifname) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.ipr(node).tc("del", "pfifo", self.index(node, ifname), handle=HOLD_QUEUE,
                          parent=shaping.CLASS_HANDLE)

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
