"""The host NICs of a fabric, as traffic and probes address them, and the pairs of NICs whose
traffic crosses the fabric (the reachability check's, the probe planner's, the workloads'). Pure:
no kernel, no lab."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import networkx as nx

from twin.model.fabric import Fabric

# Destinations per NIC in the reachability sample a lab's convergence check uses (all pairs grow
# with NICs squared: 63,488 at pod128, 10 s of echoes); `twin lab up --all-pairs` checks all.
SAMPLE_PER_NIC = 32


@dataclass(frozen=True)
class Nic:
    host: str
    ifname: str
    address: str
    rail: int = 1
    leaf: str = ""

    @property
    def label(self) -> str:
        return f"{self.host}:{self.ifname}"


def fabric_nics(fabric: Fabric) -> list[Nic]:
    return [Nic(link.b.node, link.b.ifname, str(link.b.address.ip), link.rail or 1, link.a.node)
            for link in fabric.links if link.kind == "host"]


def switches_between(fabric: Fabric, nics: list[Nic]) -> dict[str, dict[str, int]]:
    """Leaf -> leaf -> the switches on a shortest path between them, over these NICs' leaves: the
    TTLs the switches answer on the way from a NIC of one to a NIC of the other."""
    switches = fabric.switch_graph()
    leaves = {nic.leaf for nic in nics}
    return {leaf: {other: hops + 1 for other, hops in nx.single_source_shortest_path_length(switches, leaf).items()
                   if other in leaves} for leaf in sorted(leaves)}


class NoFabricPairsError(ValueError):
    """A lab of one host: no traffic of a flows or probes workload would cross the fabric."""
    hint = "a lab with two hosts or more (groups x hosts_per_group >= 2)"


def require_fabric_pairs(fabric: Fabric, what: str) -> None:
    if len(fabric.hosts) < 2:
        raise NoFabricPairsError(f"{what} runs between NICs of different hosts, and lab {fabric.name} has "
                                 f"{len(fabric.hosts)} host: there would be nothing to send")


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
