"""The host NICs of a fabric, as traffic and probes address them, and the pairs of NICs whose
traffic crosses the fabric (the reachability check's, the probe planner's, the workloads'). Pure:
no kernel, no lab."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import networkx as nx

from twin.model.build import nic_port_name
from twin.model.fabric import Fabric

# Destinations per NIC in the reachability sample a lab's convergence check uses (all pairs grow
# with NICs squared: 63,488 at pod128, 10 s of echoes); `twin lab up --all-pairs` checks all.
SAMPLE_PER_NIC = 32


@dataclass(frozen=True)
class Nic:
    host: str
    ifname: str  # the NIC's name: its port's, or nicR for a dual-port NIC (ports nicRa, nicRb)
    address: str
    rail: int = 1
    leaf: str = ""  # the leaf of its (first) port
    ports: tuple[str, ...] = ()  # its interfaces; () reads as (ifname,)
    # The leaves that deliver to its address: a port of a dual-port NIC, as a probe's destination,
    # is reached through either of its NIC's leaves (whichever the last spine hashes to, or the
    # sender's own leaf when it is one of them). () reads as (leaf,).
    reached_from: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.host}:{self.ifname}"

    @property
    def interfaces(self) -> tuple[str, ...]:
        return self.ports or (self.ifname,)

    @property
    def delivering_leaves(self) -> tuple[str, ...]:
        return self.reached_from or (self.leaf,)

    @property
    def shares_address(self) -> bool:
        """A port of a dual-port NIC: its address is on its other port too, so a socket sending from
        it binds to the address and picks the port by IP_UNICAST_IF (probes/agent.py)."""
        return len(self.reached_from) > 1

    @property
    def device(self) -> str | None:
        """The interface a socket of this NIC binds to (SO_BINDTODEVICE), or None for a dual-port
        NIC: its sockets bind to its address only, and the host's routes spread them over both ports
        (model/host_routing.py), so that a port whose leaf is gone is left at once."""
        return self.ifname if len(self.interfaces) == 1 else None


def fabric_nics(fabric: Fabric) -> list[Nic]:
    """Every host NIC, in the order of the model's host links (a dual-port NIC once, at its first)."""
    if fabric.nic_ports == 1:
        return [Nic(link.b.node, link.b.ifname, str(link.b.address.ip), link.rail or 1, link.a.node)
                for link in fabric.links if link.kind == "host"]
    return [Nic(host, nic_port_name(rail), str(links[0].b.address.ip), rail, links[0].a.node,
                tuple(link.b.ifname for link in links)) for (host, rail), links in fabric.links_by_nic().items()]


def probe_endpoints(fabric: Fabric) -> list[Nic]:
    """What the probe mesh sends from and to: every NIC, and every port of a dual-port NIC as a NIC
    of its own (its label `host:nicRa`, its leaf the port's), so that a probe's first hop is the
    port it is sent from; as a destination such a port stands for its NIC, reached through any of
    the NIC's leaves (`reached_from`), and the probe's last link is the one its trace ends on."""
    if fabric.nic_ports == 1:
        return fabric_nics(fabric)
    ends = []
    for (host, rail), links in fabric.links_by_nic().items():
        leaves = tuple(link.a.node for link in links)
        ends += [Nic(host, link.b.ifname, str(link.b.address.ip), rail, link.a.node, reached_from=leaves)
                 for link in links]
    return ends


def probe_destination(end: Nic) -> Nic:
    """What a probe sent to `end` is addressed to: the NIC itself, for a port of a dual-port NIC
    (labelled `host:nicR`; either port takes it), so that what the probes learn of a route toward
    an address is learned once."""
    if not end.shares_address:
        return end
    return Nic(end.host, nic_port_name(end.rail), end.address, end.rail, end.reached_from[0],
               reached_from=end.reached_from)


def switches_between(fabric: Fabric, nics: list[Nic]) -> dict[str, dict[str, int]]:
    """Leaf -> leaf -> the switches on a shortest path between them, over these NICs' leaves: the
    TTLs the switches answer on the way from a NIC of one to a NIC of the other."""
    switches = fabric.switch_graph()
    leaves = {nic.leaf for nic in nics}
    return {leaf: {other: hops + 1 for other, hops in nx.single_source_shortest_path_length(switches, leaf).items()
                   if other in leaves} for leaf in sorted(leaves)}


def nic_links(fabric: Fabric, host: str, nic: str | None) -> list:
    """The host's links of NIC `nic`: named as the NIC (nicR: both ports of a dual-port NIC) or as
    one of its ports (nicRa); every link of the host for None."""
    return [link for link in fabric.links_of(host)
            if nic is None or nic in (link.endpoint(host).ifname, nic_port_name(link.rail or 1))]


class NoFabricPairsError(ValueError):
    """A lab of one host: no traffic of a flows or probes workload would cross the fabric."""
    hint = "a lab with two hosts or more (groups x hosts_per_group >= 2)"


def require_fabric_pairs(fabric: Fabric, what: str) -> None:
    if len(fabric.hosts) < 2:
        raise NoFabricPairsError(f"{what} runs between NICs of different hosts, and lab {fabric.name} has "
                                 f"{len(fabric.hosts)} host: there would be nothing to send")


class DualPortNicsError(ValueError):
    """What re-traces a flow from its NIC's one port (flow dodging), which a dual-port NIC's flow
    may leave by either."""
    hint = ("a lab with `nic_ports: 1` for it; collectives, flows, probes, faults and every detector run on "
            "both")


def require_single_port(fabric: Fabric, what: str) -> None:
    """Refuse `what` on a dual-port NIC lab: it follows a flow from its NIC's one port, and the
    host's hash sends a dual-port NIC's flow out of either."""
    if fabric.nic_ports != 1:
        raise DualPortNicsError(f"{what} does not model dual-port NICs yet (lab {fabric.name} has "
                                f"nic_ports: {fabric.nic_ports})")


def fabric_pairs(nics: list[Nic]) -> list[tuple[int, int]]:
    """Index pairs of NICs on different hosts: the pairs whose traffic crosses the fabric."""
    return [(s, d) for s in range(len(nics)) for d in range(len(nics)) if nics[s].host != nics[d].host]


def sample_pairs(nics: list[Nic], per_nic: int = SAMPLE_PER_NIC) -> list[tuple[int, int]]:
    """Pairs in which every NIC sends to about `per_nic` NICs of other hosts and answers as many;
    all pairs when that is not more. The NICs are put on a ring, rails interleaved and each rail
    in a fixed shuffled order, and each NIC sends to the NICs at `per_nic` offsets spread evenly
    around it, the offsets' residues cycling through the rails: destinations span every rail and
    many leaves. At pod128 (256 NICs, 8,192 of 63,488 pairs) echo and reply cross each direction
    of each switch link about 15 times on average: ECMP's hash would have to miss a link every
    time (the ECMP check has already seen every next hop installed)."""
    pairs = fabric_pairs(nics)
    if len(pairs) <= len(nics) * per_nic:
        return pairs
    by_rail: dict[int, list[int]] = {}
    for index in sorted(range(len(nics)), key=lambda i: zlib.crc32(nics[i].label.encode())):
        by_rail.setdefault(nics[index].rail, []).append(index)
    rails = [by_rail[rail] for rail in sorted(by_rail)]
    ring = [rail[k] for k in range(max(map(len, rails))) for rail in rails if k < len(rail)]
    chosen = set()
    for position, src in enumerate(ring):
        for step in range(per_nic):
            offset = 1 + step * (len(ring) - 1) // per_nic
            offset += (step - offset) % len(rails)  # the rails in turn
            for _ in range(len(ring)):
                dst = ring[(position + offset) % len(ring)]
                if nics[dst].host != nics[src].host:
                    chosen.add((src, dst))
                    break
                offset += len(rails)
    return sorted(chosen)


def checked_pairs(nics: list[Nic], all_pairs: bool) -> list[tuple[int, int]]:
    """The pairs a convergence check sends echoes between: all, or the sample."""
    return fabric_pairs(nics) if all_pairs else sample_pairs(nics)
