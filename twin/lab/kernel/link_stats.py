"""Every interface's counters and operational state in one namespace, from two raw rtnetlink
dumps on a socket kept open there.

The telemetry sampler reads every node ten times a second inside the runner's process. Reading
/proc/net/dev and one flags ioctl per interface from inside the namespace took two namespace
switches, four file opens and a system call per interface a node: ~300 calls for rail4 each
sample, each one a release and retake of the interpreter lock the runner's detectors wait on.
Here a node costs two dumps, and little Python each:
- the links (RTM_GETLINK) for the index, name and IFF_RUNNING of each, read from the message's
  header and its first attribute (the kernel puts IFLA_IFNAME first); walking a link message to
  its counters took ~30 attributes, most of the sampler's time in the lock;
- the counters (RTM_GETSTATS, asking for IFLA_STATS_LINK_64 only: the kernel's stats-only dump),
  one attribute a link.

The counters are the kernel's rtnl_link_stats64, the figures /proc/net/dev prints: its receive
drops column is rx_dropped + rx_missed_errors (net/core/net-procfs.c), so that sum is kept here
too. The state is IFF_RUNNING in ifi_flags, as SIOCGIFFLAGS answers it (both dev_get_flags()).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from twin.lab.kernel import rawdump

RTM_NEWLINK, RTM_GETLINK, RTM_NEWSTATS, RTM_GETSTATS = 16, 18, 92, 94
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
IF_STATS_MSG = struct.Struct("=BxxxII")  # family, index, filter mask
IFLA_IFNAME = 3
IFLA_STATS_LINK_64 = 1
LINK_64_ONLY = 1 << (IFLA_STATS_LINK_64 - 1)  # IFLA_STATS_FILTER_BIT
IFF_RUNNING = 0x40
STATS64 = struct.Struct("=16Q")  # the first 16 of rtnl_link_stats64, through rx_missed_errors
RX_PACKETS, TX_PACKETS, RX_BYTES, TX_BYTES, RX_ERRORS, TX_ERRORS, RX_DROPPED, TX_DROPPED = range(8)
RX_MISSED_ERRORS = 15
COUNTER_NAMES = ("rx_bytes", "rx_packets", "rx_errors", "rx_dropped",
                 "tx_bytes", "tx_packets", "tx_errors", "tx_dropped")


@dataclass(frozen=True, slots=True)
class Link:
    index: int
    name: str
    running: bool  # operational state up
    counters: dict[str, int]  # COUNTER_NAMES


class LinkStatsReader:
    """One namespace's links, over a NETLINK_ROUTE socket in it (rawdump.socket_in) that its
    owner closes."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._links = rawdump.request(RTM_GETLINK, IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        self._stats = rawdump.request(RTM_GETSTATS, IF_STATS_MSG.pack(socket.AF_UNSPEC, 0, LINK_64_ONLY))

    def read(self) -> list[Link]:
        """The links that both dumps saw (one created or deleted between them is left out)."""
        named = {}
        for kind, data, start, end in rawdump.dump(self.sock, self._links):
            if kind == RTM_NEWLINK:
                _family, _type, index, flags, _change = IFINFOMSG.unpack_from(data, start)
                name = _name(data, start + IFINFOMSG.size, end)
                if name is not None:
                    named[index] = (name, bool(flags & IFF_RUNNING))
        links = []
        for kind, data, start, end in rawdump.dump(self.sock, self._stats):
            if kind != RTM_NEWSTATS:
                continue
            _family, index, _mask = IF_STATS_MSG.unpack_from(data, start)
            stats = _stats(data, start + IF_STATS_MSG.size, end)
            if index in named and stats is not None:
                name, running = named[index]
                links.append(Link(index, name, running, dict(zip(COUNTER_NAMES, (
                    stats[RX_BYTES], stats[RX_PACKETS], stats[RX_ERRORS], stats[RX_DROPPED] + stats[RX_MISSED_ERRORS],
                    stats[TX_BYTES], stats[TX_PACKETS], stats[TX_ERRORS], stats[TX_DROPPED]), strict=True))))
        return links


def _name(data: bytes, start: int, end: int) -> str | None:
    for kind, value, value_end in rawdump.attributes(data, start, end):
        if kind == IFLA_IFNAME:  # the first attribute: the walk stops at once
            return data[value:value_end].split(b"\0", 1)[0].decode()
    return None


def _stats(data: bytes, start: int, end: int) -> tuple[int, ...] | None:
    for kind, value, value_end in rawdump.attributes(data, start, end):
        if kind == IFLA_STATS_LINK_64 and value_end - value >= STATS64.size:
            return STATS64.unpack_from(data, value)
    return None
