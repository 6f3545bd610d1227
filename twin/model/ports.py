"""Which ports feed which: the ports of a lab that PFC manages, and the upstream senders of each.

A port is one direction of a link: the egress of `node` through `ifname`. Switch ports carry an
egress queue that can assert XOFF; host NICs are senders only (a NIC paused by its leaf holds its
own queue, and the host's sockets block behind it).
"""

from __future__ import annotations

from typing import NamedTuple

from twin.model.fabric import Fabric

TIER = {"host": 0, "leaf": 1, "spine": 2, "superspine": 3}


class Port(NamedTuple):
    node: str
    ifname: str

    def __str__(self) -> str:
        return f"{self.node} {self.ifname}"


def ports(fabric: Fabric) -> list[Port]:
    """Every egress port of the lab (switch ports and host NICs), in a stable order."""
    return sorted(Port(end.node, end.ifname) for link in fabric.links for end in (link.a, link.b))


def peer(fabric: Fabric, port: Port) -> Port:
    link = next(each for each in fabric.links_of(port.node) if each.endpoint(port.node).ifname == port.ifname)
    end = link.peer(port.node)
    return Port(end.node, end.ifname)


def direction(fabric: Fabric, port: Port) -> str:
    """The link direction a port sends into: 'leaf-g1-r1 -> spine-r1-s1'."""
    return f"{port.node} -> {peer(fabric, port).node}"


def feeders(fabric: Fabric, node: str, ifname: str) -> list[tuple[str, str]]:
    """Egress ports of the neighbours whose traffic can leave `node` through `ifname`.

    Routing in the Clos is valley-free: a packet that came down into a switch never goes up
    again. So a port going up is fed only from below, a port going down from every other
    neighbour. (Pausing every ingress instead builds cyclic pause dependencies, a PFC
    deadlock that outlives the storm.)"""
    out = next(link for link in fabric.links_of(node) if link.endpoint(node).ifname == ifname).peer(node).node
    level = TIER[fabric.nodes[node].role]
    going_up = TIER[fabric.nodes[out].role] > level
    result = []
    for link in fabric.links_of(node):
        neighbour = link.peer(node)
        if neighbour.node == out or (going_up and TIER[fabric.nodes[neighbour.node].role] > level):
            continue
        result.append((neighbour.node, neighbour.ifname))
    return result
