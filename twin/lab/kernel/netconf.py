"""Per-node kernel network configuration over netlink: links, addresses, sysctls, host routing."""

from __future__ import annotations

import os
from functools import lru_cache
from ipaddress import IPv4Address, IPv4Interface

from pyroute2 import IPRoute

from twin.lab.kernel import nlbatch
from twin.lab.kernel.nsutil import write_sysctls
from twin.model.fabric import Fabric, Node
from twin.model.host_routing import HOST_TCP_CC, ROUTE_PROTOCOL, HostRoute, HostRule, host_routing
from twin.model.sysctls import node_sysctls

# A wire never reorders a flow, and veth pairs may: a packet a port sends is queued for the next
# hop on the backlog of the CPU that sent it (netif_rx), and a shaped port is emptied by whichever
# CPU runs its qdisc (the sender, the shaper's timer, a PFC kick). Two packets of one flow sent by
# two CPUs overtook each other when the first one's CPU was busy: a RoCE receiver
# saw a PSN gap with nothing dropped (3 of ~90 runs on mini beside three busy loops), and
# go-back-N resent a window: a CI failure of 2026-11-28.
# Receive packet steering on every port with all of the machine's CPUs puts each flow on one
# CPU's backlog by its hash, so every hop keeps a flow's order. A namespace's devices take
# rps_default_mask when they are created (kernel 6.2+), so it is set before the links.
RPS_DEFAULT_MASK = "net.core.rps_default_mask"


def cpu_mask(cpus: set[int]) -> str:
    """The kernel's cpumask text for `cpus`: hex words of 32 CPUs, highest first, comma-separated."""
    bits = sum(1 << cpu for cpu in cpus)
    words = [(bits >> shift) & 0xFFFFFFFF for shift in range(0, max(cpus, default=0) + 1, 32)]
    return ",".join(f"{word:08x}" for word in reversed(words))


def in_order_delivery() -> dict[str, str]:
    """The sysctl that keeps flows in order across the lab's veths, where the kernel has it."""
    if not os.path.exists("/proc/sys/" + RPS_DEFAULT_MASK.replace(".", "/")):
        return {}
    return {RPS_DEFAULT_MASK: cpu_mask(os.sched_getaffinity(0))}


def configure_sysctls(netns_path: str, fabric: Fabric, node: Node) -> None:
    write_sysctls(netns_path, node_sysctls(fabric, node, machine=in_order_delivery()))


# Encoded once (nlbatch.py) with these addresses, written over with each port's own (IFA_LOCAL) and
# its peer's (IFA_ADDRESS: the same address, but a point-to-point port's far end).
ADDRESS_SENTINEL = IPv4Address("10.250.251.252")
PEER_SENTINEL = IPv4Address("10.250.251.253")
PREFIXLEN_OFFSET = nlbatch.HEADER.size + 1  # ifaddrmsg: family, prefixlen, flags, scope, index


@lru_cache(maxsize=8)
def _link_up(mtu: int | None) -> list[bytes]:
    return nlbatch.encode(lambda batch: batch.link("set", index=0, state="up", **({"mtu": mtu} if mtu else {})))


@lru_cache(maxsize=1)
def _address_template() -> bytes:
    [message] = nlbatch.encode(lambda batch: batch.addr("add", index=0, local=str(ADDRESS_SENTINEL),
                                                        address=str(PEER_SENTINEL), prefixlen=32))
    if message.count(ADDRESS_SENTINEL.packed) != 1 or message.count(PEER_SENTINEL.packed) != 1:
        raise ValueError("the address request does not carry the addresses as expected")
    return message


def address_request(address: IPv4Interface, peer: IPv4Address | None = None) -> list[bytes]:
    """Add `address`; with `peer`, as a point-to-point address (its connected route is the peer's /32)."""
    message = bytearray(_address_template().replace(ADDRESS_SENTINEL.packed, address.ip.packed)
                        .replace(PEER_SENTINEL.packed, (peer or address.ip).packed))
    message[PREFIXLEN_OFFSET] = address.network.prefixlen
    return [bytes(message)]


def configure_interfaces(sender: nlbatch.Sender, index_of: dict[str, int], fabric: Fabric, node: Node) -> dict[str,
                                                                                                               int]:
    """Add to `sender` the requests that bring up lo and every port with MTU and address (`index_of`:
    the namespace's ifname -> index); returns the ports' ifname -> index."""
    sender.add(_link_up(None), index_of["lo"], "lo up")
    if node.loopback is not None:
        sender.add(address_request(IPv4Interface(f"{node.loopback}/32")), index_of["lo"], "loopback address")
    indexes = {}
    for link in fabric.links_of(node.name):
        end = link.endpoint(node.name)
        index = index_of[end.ifname]
        sender.add(_link_up(fabric.mtu), index, f"{end.ifname} up, MTU {fabric.mtu}")
        peer = link.peer_address(node.name)
        sender.add(address_request(end.address, peer), index,
                   f"{end.ifname} address {end.address}" + (f" peer {peer}" if peer else ""))
        indexes[end.ifname] = index
    return indexes


def configure_host_routing(ipr: IPRoute, fabric: Fabric, node: Node, indexes: dict[str, int]) -> None:
    """The host's per-NIC routes and rules (model/host_routing.py), as netlink."""
    cc = {"cc_algo": HOST_TCP_CC}
    for item in host_routing(fabric, node):
        match item:
            case HostRoute(destination, nexthops, table):
                in_table = {"table": table} if table is not None else {}
                hops = [{"gateway": gateway, "oif": indexes[dev]} for gateway, dev in nexthops]
                via = {"multipath": hops} if len(hops) > 1 else hops[0]
                ipr.route("add", dst=destination, proto=ROUTE_PROTOCOL, metrics=cc, **via, **in_table)
            case HostRule(priority, table, source, uid):
                selector = {"src": source, "src_len": 32} if source else {"uid_range": f"{uid}:{uid}"}
                ipr.rule("add", table=table, priority=priority, **selector)
