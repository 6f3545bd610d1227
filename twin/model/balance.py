"""Adaptive routing on paper (routing.load_balance): the ECMP groups of each switch, whose members
its data plane may move a reorderable packet between, and the flowlet gap.

A group is the set of neighbours on the shortest paths to some host prefix (as model/ecmp.py
counts them): a leaf's spines, a spine's superspines (toward other rails), a superspine's spines
of one rail plane (down toward that plane's leaves). Groups that share a neighbour are merged;
the kernel's FIB says, packet by packet, which members route that packet's destination now
(lab/ebpf/balance.h). A single next hop (a spine down to a leaf of its plane) is no group.

The flowlet gap: a flow that pauses longer than the largest difference in delay between two of
its paths can change path without its packets overtaking each other. In the twin that difference
is queueing (the links have no delay of their own), at most the time the deepest queue takes to
drain at line rate: XOFF on a lossless lab (PFC holds the queues there; 4 ms of line rate by
default), the buffer on a lossy one (queues fill until they drop). That is the default: a real
switch's 256 us is the same rule at 400 Gbit/s and its queues' depth in time.
"""

from __future__ import annotations

import networkx as nx

from twin.model.buffers import for_port
from twin.model.ecmp import announcer_distances
from twin.model.fabric import Fabric
from twin.model.ports import TIER, Port, ports


def uplinks(fabric: Fabric, switch: str) -> list[Port]:
    """The switch's ports toward the tier above, in the order of their far ends' names."""
    level = TIER[fabric.nodes[switch].role]
    found = []
    for link in fabric.links_of(switch):
        far = link.peer(switch)
        if TIER[fabric.nodes[far.node].role] > level:
            found.append((far.node, Port(switch, link.endpoint(switch).ifname)))
    return [port for _far, port in sorted(found)]


def ecmp_groups(fabric: Fabric) -> dict[str, list[list[Port]]]:
    """switch -> its ECMP groups, each its ports in the order of their far ends' names."""
    switches = nx.Graph(fabric.switch_graph())
    # per set of leaves announcing a prefix (a dual-port NIC's two leaves are a group of their own
    # at each spine above them), each switch's distance to the nearest
    nearest = announcer_distances(fabric, switches)
    announcers = sorted(nearest)
    groups: dict[str, list[list[Port]]] = {}
    for switch in fabric.switches:
        name = switch.name
        merged: list[set[str]] = []
        for leaves in announcers:
            if name in leaves:
                continue
            near = nearest[leaves]
            hops = {peer for peer in switches.neighbors(name) if near[peer] == near[name] - 1}
            if len(hops) < 2 or any(hops <= group for group in merged):
                continue
            for group in [g for g in merged if g & hops]:
                merged.remove(group)
                hops |= group
            merged.append(hops)
        port_to = {link.peer(name).node: Port(name, link.endpoint(name).ifname) for link in fabric.links_of(name)}
        groups[name] = sorted([port_to[far] for far in sorted(group)] for group in merged)
    return groups


def flowlet_gap_s(fabric: Fabric) -> float:
    """The lab's gap, or the deepest switch queue's drain time at line rate."""
    if fabric.flowlet_gap_s is not None:
        return fabric.flowlet_gap_s
    limits = [for_port(fabric, p) for p in ports(fabric) if fabric.nodes[p.node].is_switch]
    deepest = max((t.xoff if fabric.pfc else t.buffer for t in limits), default=0)
    return deepest * 8 / fabric.rate_bps


def describe(fabric: Fabric) -> str:
    """One line for `twin lab show`."""
    if fabric.load_balance == "ecmp":
        return "load balance: ECMP (the kernel's hash)"
    detail = f", flowlet gap {flowlet_gap_s(fabric) * 1000:.1f} ms" if fabric.load_balance == "flowlet" else ""
    return (f"load balance: adaptive ({fabric.load_balance}{detail}) for reorderable packets, "
            f"ECMP for the rest")
