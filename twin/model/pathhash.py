"""Deterministic path control on paper (routing.hash_offset): the switches' own ECMP hash, as
the data plane computes it (lab/ebpf/balance.h `flow_hash`), and the path a packet takes.

Every switch picks, in each ECMP group (model/balance.py, members in the order of their far
ends' names), the member (hash + offset) mod the group's size: the hash is its tier's over the
5-tuple with the source port's low OFFSET_BITS left out, the offset is those bits. So a host
that adds k to the low byte of its source port moves the flow k members along at every hop: in
a Clos with two or more members per group, offsets k and k + 1 share no spine and no superspine.
A member without a route to the destination (the model's shortest paths) is passed over, as the
data plane passes over one its FIB refuses.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from ipaddress import IPv4Address

import networkx as nx

from twin.model.balance import ecmp_groups
from twin.model.fabric import Fabric
from twin.model.ports import Port, peer

OFFSET_BITS = 8
OFFSET_MASK = (1 << OFFSET_BITS) - 1
PROTOCOLS = {"tcp": 6, "udp": 17}
MASK32 = 0xFFFFFFFF


def seed(fabric: Fabric, switch: str) -> int:
    """A switch's hash seed (the data plane's `ecmp_group.seed`): its tier's. Every switch of a
    tier hashes a flow alike, so an offset one higher moves it to the next member wherever it
    is; the tiers hash differently, so a leaf's choice does not fix its spine's (polarization)."""
    return zlib.crc32(fabric.nodes[switch].role.encode())


def _mix(x: int) -> int:
    """lowbias32 (Chris Wellons' integer hash): the data plane's `mix`."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK32
    return x ^ (x >> 16)


def flow_hash(switch_seed: int, src: IPv4Address, dst: IPv4Address, protocol: int, sport: int, dport: int) -> int:
    h = _mix(switch_seed ^ int(src))
    h = _mix(h ^ int(dst))
    h = _mix(h ^ (protocol << 16 | sport >> OFFSET_BITS))
    return _mix(h ^ dport)


def with_offset(sport: int, offset: int) -> int:
    """The source port that carries `offset` (its low byte), the rest of `sport` kept."""
    return (sport & ~OFFSET_MASK & 0xFFFF) | (offset & OFFSET_MASK)


@dataclass(frozen=True)
class Hop:
    node: str
    egress: Port | None  # None at the destination host


class Paths:
    """The paths of one fabric (its ECMP groups and distances computed once)."""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        self.nics = {link.b.address.ip: link for link in fabric.links if link.kind == "host"}
        self.switches = fabric.switch_graph()
        self.groups = ecmp_groups(fabric)
        self.seeds = {n.name: seed(fabric, n.name) for n in fabric.switches}
        self._distance: dict[str, dict[str, int]] = {}
        self._egress = {(link.endpoint(node).node, link.peer(node).node): Port(node, link.endpoint(node).ifname)
                        for link in fabric.links for node in (link.a.node, link.b.node)}

    def distance(self, leaf: str) -> dict[str, int]:
        if leaf not in self._distance:
            self._distance[leaf] = nx.single_source_shortest_path_length(self.switches, leaf)
        return self._distance[leaf]

    def path(self, src: IPv4Address, dst: IPv4Address, protocol: int, sport: int, dport: int) -> list[Hop]:
        """The nodes a packet of this 5-tuple crosses, from the source host to the destination
        host, on the healthy fabric. KeyError for an address that is no host NIC of the lab."""
        fabric, first, last = self.fabric, self.nics[src], self.nics[dst]
        target_leaf = last.a.node
        distance = self.distance(target_leaf)
        hops = [Hop(first.b.node, Port(first.b.node, first.b.ifname))]
        node = first.a.node
        while node != target_leaf:
            toward = {far for far in self.switches.neighbors(node) if distance.get(far) == distance[node] - 1}
            group = next((g for g in self.groups.get(node, ()) if {peer(fabric, p).node for p in g} & toward), None)
            if group is None:  # a single next hop
                (far,) = toward
                egress = self._egress[(node, far)]
            else:
                first_slot = flow_hash(self.seeds[node], src, dst, protocol, sport, dport) + (sport & OFFSET_MASK)
                egress = next(group[(first_slot + tried) % len(group)] for tried in range(len(group))
                              if peer(fabric, group[(first_slot + tried) % len(group)]).node in toward)
            hops.append(Hop(node, egress))
            node = peer(fabric, egress).node
        hops.append(Hop(node, Port(node, last.a.ifname)))
        hops.append(Hop(last.b.node, None))
        return hops


def path(fabric: Fabric, src: IPv4Address, dst: IPv4Address, protocol: int, sport: int, dport: int) -> list[Hop]:
    """One path (Paths(fabric).path); build a Paths for many."""
    return Paths(fabric).path(src, dst, protocol, sport, dport)


def middle(hops: list[Hop]) -> set[str]:
    """The spines and superspines of a path (everything but its hosts and leaves)."""
    return {hop.node for hop in hops[2:-2]}

