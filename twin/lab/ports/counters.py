"""One snapshot of a lab's counters.

Interface counters come from the namespace's /proc/net/dev (read from inside it: 0.06 ms a
node, where a netlink link dump parsed by pyroute2 takes 1.4 ms), the operational state (`oper_up`)
from one flags ioctl per interface, each port's frame-check errors
(`rx_crc_errors`) from the ports' physical layer (lab/ports/phy.py); qdisc backlog and drops
from one raw qdisc dump per node (pfc/backlog.py: pyroute2 parsing every attribute of every
qdisc took about a minute for pod128's 4,600 interfaces), one socket per node kept open.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from twin.lab.handle import Lab
from twin.lab.kernel.nsutil import in_netns, interface_indexes, interfaces_running
from twin.lab.kernel.offload import snmp
from twin.lab.pfc.backlog import BacklogReader
from twin.lab.ports import phy
from twin.model import queue_tree
from twin.model.fabric import Fabric

# /proc/net/dev columns we keep, by position after the interface name
NET_DEV_FIELDS = {"rx_bytes": 0, "rx_packets": 1, "rx_errors": 2, "rx_dropped": 3,
                  "tx_bytes": 8, "tx_packets": 9, "tx_errors": 10, "tx_dropped": 11}
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
        self._roots: dict[str, BacklogReader] = {}
        self._link_cache: dict[str, dict[int, str]] = {}
        self._phy = phy.CountReader(lab)

    def read(self, checksums: bool = True, qdiscs: bool = True) -> Snapshot:
        """Interface counters always; qdisc backlog/drops and hosts' checksum errors on request
        (a qdisc dump costs ten times the rest: pyroute2 parses every message)."""
        snap = Snapshot(time.monotonic())
        for node in self.nodes:
            names, path = self._names(node), self.lab.netns(node)
            running = interfaces_running(path)
            for ifname, values in _net_dev(path).items():
                if ifname != "lo":
                    snap.interfaces[(node, ifname)] = {k: values[i] for k, i in NET_DEV_FIELDS.items()}
                    snap.interfaces[(node, ifname)]["oper_up"] = int(running.get(ifname, False))
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

    def _names(self, node: str) -> dict[int, str]:
        """Interface index -> name; indexes change only when the lab is rebuilt: read once, with
        libc's if_nameindex inside the node. A pyroute2 socket there forks a helper per node:
        beside a busy rail8 allreduce the runner's first read took 9 s, and a run of 8 s sampled
        nothing."""
        if node not in self._link_cache:
            self._link_cache[node] = {index: name for name, index in interface_indexes(self.lab.netns(node)).items()}
        return self._link_cache[node]

    def _root_queues(self, node: str) -> BacklogReader:
        if node not in self._roots:
            self._roots[node] = BacklogReader(self.lab.runtime.netns_path(node), queue_tree.ROOT_HANDLE)
        return self._roots[node]

    def close(self) -> None:
        for reader in self._roots.values():
            reader.close()
        self._phy.close()
        self._roots.clear()

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


def _net_dev(netns_path: str) -> dict[str, list[int]]:
    with in_netns(netns_path):
        with open("/proc/thread-self/net/dev") as handle:
            lines = handle.read().splitlines()[2:]
    table = {}
    for line in lines:
        name, _, values = line.partition(":")
        table[name.strip()] = [int(v) for v in values.split()]
    return table


def tier_rx_bytes(before: Snapshot, after: Snapshot, fabric: Fabric, role: str) -> int:
    """Bytes that entered the switches of one tier between two snapshots."""
    return sum(after.interfaces[key]["rx_bytes"] - before.interfaces[key]["rx_bytes"]
               for key in after.interfaces if key in before.interfaces
               and fabric.nodes[key[0]].role == role)
