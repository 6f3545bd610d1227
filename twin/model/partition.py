"""A lab split over several machines (containerlab's multi-host mode): which machine runs which node.

Switches are balanced by count, because a switch's cost (FRR, BFD, queues) is what fills a
machine; hosts are cheap. A 3-tier rail plane (its leaves and the spines of the plane) is kept on
one machine where the planes can be balanced that way: its leaf-spine links then stay local veths
and only spine-superspine and host links cross machines, as VXLAN. Otherwise (2-tier, or fewer
rails than machines) the planes are cut by switch, in plane order. Superspines, each linked to
every spine, go one by one to the lightest machine; a host goes where most of its leaves are.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

from twin.model.fabric import Endpoint, Fabric, Link, Node


def _planes(fabric: Fabric) -> list[list[Node]]:
    """Leaves and spines by rail plane (3-tier), or all of them as one (2-tier)."""
    planes: dict[int, list[Node]] = {}
    for node in fabric.by_role("leaf") + fabric.by_role("spine"):
        planes.setdefault((node.rail or 0) if fabric.tiers == 3 else 0, []).append(node)
    return [planes[key] for key in sorted(planes)]


def _by_plane(fabric: Fabric, machines: int) -> dict[str, int] | None:
    """Whole planes, largest first to the lightest machine, then the superspines one by one;
    None when that cannot come within a switch or 10 % of an even share."""
    load = [0] * machines
    where: dict[str, int] = {}
    units = _planes(fabric) + [[node] for node in fabric.by_role("superspine")]
    for unit in sorted(units, key=len, reverse=True):
        machine = min(range(machines), key=lambda m: (load[m], m))
        for node in unit:
            where[node.name] = machine
        load[machine] += len(unit)
    share = len(fabric.switches) / machines
    return where if max(load) <= share + max(1.0, 0.1 * share) else None


def _in_order(fabric: Fabric, machines: int) -> dict[str, int]:
    """Switches in plane order, then superspines, cut into equal runs: planes are cut at most once."""
    ordered = [node for plane in _planes(fabric) for node in plane] + fabric.by_role("superspine")
    return {node.name: number * machines // len(ordered) for number, node in enumerate(ordered)}


def split(fabric: Fabric, machines: int) -> dict[str, int]:
    """node name -> machine (0-based), for `machines` machines."""
    if machines < 1:
        raise ValueError("machines must be at least 1")
    where = (_by_plane(fabric, machines) if fabric.tiers == 3 else None) or _in_order(fabric, machines)
    hosts = [0] * machines
    for host in fabric.hosts:
        leaves = Counter(where[link.peer(host.name).node] for link in fabric.links_of(host.name))
        machine = min(range(machines), key=lambda m: (-leaves[m], hosts[m], m))
        where[host.name] = machine
        hosts[machine] += 1
    return where


def crossing_links(fabric: Fabric, where: dict[str, int]) -> list:
    """Links whose ends run on different machines (VXLAN in the export)."""
    return [link for link in fabric.links if where[link.a.node] != where[link.b.node]]


VXLAN_PORT = 14789  # containerlab's default for vxlan-stitch; the export and a share use the same


@dataclass(frozen=True)
class SeamEnd:
    """This machine's end of a link to another machine: a VXLAN tunnel, one VNI per link, the
    same at both ends (the link's number in the model, plus one)."""
    link: Link
    end: Endpoint  # the local end
    remote_machine: int  # 0-based
    vni: int


def seam(fabric: Fabric, where: dict[str, int], machine: int) -> list[SeamEnd]:
    """Machine `machine`'s (0-based) ends of the links that cross to other machines, in model order."""
    ends = []
    for number, link in enumerate(fabric.links):
        a, b = where[link.a.node], where[link.b.node]
        if a != b and machine in (a, b):
            local, remote = (link.a, b) if a == machine else (link.b, a)
            ends.append(SeamEnd(link, local, remote, number + 1))
    return ends


def share(fabric: Fabric, machines: int, machine: int, addresses: list[str], underlay: str | None = None) -> Fabric:
    """Machine `machine`'s (1-based) share of the lab split over `machines`, as a lab of its own named
    <lab>-m<K> (the shares of one lab on one box must not collide in state or names). Its queues
    are lossy, as an exported lab's are: the PFC controller and ECN see one machine's queues, and a
    queue whose far end is elsewhere could never be drained in its count."""
    if not 1 <= machine <= machines:
        raise ValueError(f"machine {machine} is not one of 1..{machines}")
    if len(addresses) != machines:
        raise ValueError(f"{len(addresses)} addresses for {machines} machines")
    placement = {node: where + 1 for node, where in split(fabric, machines).items()}
    return dataclasses.replace(fabric, name=f"{fabric.name}-m{machine}", machines=machines, machine=machine,
                               machine_addresses=tuple(addresses), underlay=underlay, split_of=fabric.name,
                               placement=placement, pfc=False, ecn=False).freeze()
