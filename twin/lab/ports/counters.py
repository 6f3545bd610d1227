"""One snapshot of a lab's counters.

Interface counters and the operational state (`oper_up`) come from a raw link dump and stats
dump per node (kernel/link_stats.py: no namespace entered, no per-interface call), each port's frame-check
errors (`rx_crc_errors`) from the ports' physical layer (lab/ports/phy.py); qdisc backlog and
drops from one raw qdisc dump per node (pfc/backlog.py: pyroute2 parsing every attribute of
every qdisc took about a minute for pod128's 4,600 interfaces), on one socket per node kept open.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

from twin.lab.handle import Lab
from twin.lab.kernel import rawdump
from twin.lab.kernel.link_stats import COUNTER_NAMES, LinkStatsReader
from twin.lab.kernel.offload import snmp
from twin.lab.pfc.backlog import BacklogReader
from twin.lab.ports import phy
from twin.model import queue_tree
from twin.model.fabric import Fabric

NET_DEV_FIELDS = COUNTER_NAMES  # the interface counters /proc/net/dev shows, by the same names
CHECKSUM_COUNTERS = ("Udp.InCsumErrors", "Tcp.InCsumErrors", "Ip.InHdrErrors")


@dataclass
class Snapshot:
    t: float  # CLOCK_MONOTONIC
    interfaces: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)  # (node, ifname)
    checksum_errors: dict[tuple[str, str], int] = field(default_factory=dict)  # (host, counter)


class CounterReader:
    """Reads every node's counters; close() releases the netlink sockets."""

    def __init__(self, lab: Lab, nodes: list[str] | None = None):
        self.lab, self.fabric = lab, lab.fabric
        self.nodes = nodes or sorted(n.name for n in self.fabric.local_nodes)
        self._sockets: dict[str, socket.socket] = {}  # one netlink socket a node, for both dumps
        self._roots: dict[str, BacklogReader] = {}
        self._links: dict[str, LinkStatsReader] = {}
        self._phy = phy.CountReader(lab)

    def read(self, checksums: bool = True, qdiscs: bool = True) -> Snapshot:
        """Interface counters always; qdisc backlog/drops and hosts' checksum errors on request."""
        snap = Snapshot(time.monotonic())
        for node in self.nodes:
            names = {}
            for link in self._link_reader(node).read():
                names[link.index] = link.name
                if link.name != "lo":
                    snap.interfaces[(node, link.name)] = {**link.counters, "oper_up": int(link.running)}
            for index, (backlog, drops) in (self._root_queues(node).read().items() if qdiscs else ()):
                entry = snap.interfaces.get((node, names.get(index)))
                if entry is not None:  # the root HTB's counts: its classes' queues' drops included
                    entry["backlog_bytes"], entry["qdisc_drops"] = backlog, drops
            if checksums and self.fabric.nodes[node].role == "host":
                values = snmp(self.lab.netns(node))
                for name in CHECKSUM_COUNTERS:
                    snap.checksum_errors[(node, name)] = values.get(name, 0)
        for (node, ifname), values in self._phy.read().items():
            entry = snap.interfaces.get((node, ifname))
            if entry is not None:  # a frame that fails the check is a receive error, as a NIC counts it
                entry["rx_crc_errors"] = values["crc_errors"]
                entry["rx_errors"] += values["crc_errors"]
        return snap

    def _socket(self, node: str) -> socket.socket:
        if node not in self._sockets:
            self._sockets[node] = rawdump.socket_in(self.lab.runtime.netns_path(node))
        return self._sockets[node]

    def _link_reader(self, node: str) -> LinkStatsReader:
        if node not in self._links:
            self._links[node] = LinkStatsReader(self._socket(node))
        return self._links[node]

    def _root_queues(self, node: str) -> BacklogReader:
        if node not in self._roots:
            self._roots[node] = BacklogReader(self._socket(node), queue_tree.ROOT_HANDLE)
        return self._roots[node]

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._phy.close()
        self._sockets.clear()
        self._roots.clear()
        self._links.clear()

    def __enter__(self) -> CounterReader:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


@dataclass(frozen=True)
class InterfaceRate:
    node: str
    ifname: str
    rx_bps: float
    tx_bps: float
    drops: int  # rx, tx and qdisc drops between the snapshots
    backlog_bytes: int  # at the second snapshot


def interface_rates(first: Snapshot, last: Snapshot) -> list[InterfaceRate]:
    """Every interface's rates between two snapshots, busiest first."""
    span = max(1e-6, last.t - first.t)
    rates = []
    for (node, ifname), now in last.interfaces.items():
        before = first.interfaces.get((node, ifname), now)
        rates.append(InterfaceRate(
            node, ifname, (now["rx_bytes"] - before["rx_bytes"]) * 8 / span,
            (now["tx_bytes"] - before["tx_bytes"]) * 8 / span,
            sum(now.get(k, 0) - before.get(k, 0) for k in ("rx_dropped", "tx_dropped", "qdisc_drops")),
            now.get("backlog_bytes", 0)))
    return sorted(rates, key=lambda r: (r.rx_bps + r.tx_bps, r.node, r.ifname), reverse=True)


def tier_rx_bytes(before: Snapshot, after: Snapshot, fabric: Fabric, role: str) -> int:
    """Bytes that entered the switches of one tier between two snapshots."""
    return sum(after.interfaces[key]["rx_bytes"] - before.interfaces[key]["rx_bytes"]
               for key in after.interfaces if key in before.interfaces
               and fabric.nodes[key[0]].role == role)
