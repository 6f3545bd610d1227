"""Reading the backlog of every data queue of one node, fast: one qdisc dump on a netlink socket
opened in the node's namespace, and only the numbers needed taken out of the reply.

The PFC controller does this in its event loop, where nothing may take long: pyroute2 parses
every attribute of every qdisc (0.4-7 ms a node here), and opening its namespaced socket forks.
The reply is walked with struct (kernel/rawdump.py), for the queue statistics
(TCA_STATS2 > TCA_STATS_QUEUE) of the qdiscs with the gate's handle.
"""

from __future__ import annotations

import socket
import struct

from twin.lab.kernel import rawdump

RTM_NEWQDISC, RTM_GETQDISC = 36, 38
TCA_STATS2, TCA_STATS_QUEUE = 7, 3
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits


class BacklogReader:
    """One node's queues: {ifindex: (backlog bytes, drops)} of the qdiscs with `handle`, over a
    NETLINK_ROUTE socket in the node (rawdump.socket_in) that its owner closes."""

    def __init__(self, sock: socket.socket, handle: int):
        self.sock = sock
        self.handle = handle
        self.request = rawdump.request(RTM_GETQDISC, TCMSG.pack(0, 0, 0, 0, 0))

    def read(self) -> dict[int, tuple[int, int]]:
        found: dict[int, tuple[int, int]] = {}
        for kind, data, start, end in rawdump.dump(self.sock, self.request):
            if kind != RTM_NEWQDISC:
                continue
            _family, index, handle, _parent, _info = TCMSG.unpack_from(data, start)
            if handle == self.handle:
                stats = _queue_stats(data, start + TCMSG.size, end)
                if stats is not None:
                    found[index] = stats
        return found


def _queue_stats(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    for kind, value, value_end in rawdump.attributes(data, start, end):
        if kind == TCA_STATS2:
            for inner, at, _ in rawdump.attributes(data, value, value_end):
                if inner == TCA_STATS_QUEUE:
                    _qlen, backlog, drops, _requeues, _overlimits = QUEUE.unpack_from(data, at)
                    return backlog, drops
    return None
