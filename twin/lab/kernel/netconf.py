"""Per-node kernel network configuration over netlink: links, addresses, sysctls, host routing."""

from __future__ import annotations

import os
import zlib
from functools import lru_cache
from ipaddress import IPv4Address, IPv4Interface

from pyroute2 import IPRoute

from twin.lab.kernel import nlbatch
from twin.lab.kernel.nsutil import write_sysctls
from twin.model.buffers import frame_bytes, line_bytes
from twin.model.fabric import Fabric, Node
from twin.model.host_routing import HOST_TCP_CC, ROUTE_PROTOCOL, HostRoute, HostRule, host_routing

TWIN_PORTS = "47000-47199"  # fixed ports of traffic.py, workloads/flows.py, probes/mesh.py

# The kernel's ECMP hash fields: 0 hashes addresses, 1 the 5-tuple (faults/hash_policy.py changes
# it on one switch; config-audit and the restoration snapshot read it).
HASH_POLICY_SYSCTL = "net.ipv4.fib_multipath_hash_policy"
HASH_POLICIES = {"l3": "0", "l4": "1"}


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


def node_sysctls(fabric: Fabric, node: Node) -> dict[str, str]:
    common = {
        # Loose reverse-path filtering: ECMP and multi-NIC hosts see asymmetric paths.
        "net.ipv4.conf.all.rp_filter": "2",
        "net.ipv4.conf.default.rp_filter": "2",
        HASH_POLICY_SYSCTL: HASH_POLICIES[fabric.ecmp_hash],
        # A route over a link without carrier is skipped at once, before BGP withdraws it.
        "net.ipv4.conf.all.ignore_routes_with_linkdown": "1",
        "net.ipv4.conf.default.ignore_routes_with_linkdown": "1",
        # No IPv6 chatter (RS/ND/MLD) in counters: the fabric is IPv4 only.
        "net.ipv6.conf.all.disable_ipv6": "1",
        "net.ipv6.conf.default.disable_ipv6": "1",
    } | in_order_delivery()
    if node.is_switch:
        # Path discovery relies on every switch answering TTL-exceeded (no rate limit), from
        # the address of the interface the probe came in on, which names the link it crossed.
        return common | {"net.ipv4.ip_forward": "1", "net.ipv4.icmp_ratelimit": "0",
                         # No reverse-path filter, as fabric switches run without uRPF: the
                         # TTL-exceeded answers come from switch-to-switch addresses, which BGP
                         # does not advertise (bgpd.conf: EDGE-ONLY).
                         "net.ipv4.conf.all.rp_filter": "0", "net.ipv4.conf.default.rp_filter": "0",
                         "net.ipv4.icmp_msgs_per_sec": "100000", "net.ipv4.icmp_msgs_burst": "10000",
                         "net.ipv4.icmp_errors_use_inbound_ifaddr": "1",
                         "net.ipv4.fib_multipath_use_neigh": "1",
                         # Its own ECMP hash seed per switch, as production switches have: with one
                         # seed everywhere, every tier picks the same next-hop index for a flow and a
                         # 3-tier fabric uses 2 of its 8 paths (hash polarization).
                         "net.ipv4.fib_multipath_hash_seed": str(zlib.crc32(node.name.encode()) or 1)}
    # Multi-NIC host: answer ARP only on the NIC that owns the address.
    return common | {"net.ipv4.ip_forward": "0", "net.ipv4.conf.all.arp_ignore": "1",
                     # TCP's own queue in the NIC (TSQ), scaled like the line rate: 4 MB is 80 us at
                     # 400 Gbit/s but 160 ms at 200 Mbit/s, which a NIC paused by PFC would fill and
                     # every other packet of the host would wait behind.
                     "net.ipv4.tcp_limit_output_bytes": str(host_tcp_queue_bytes(fabric)),
                     "net.ipv4.conf.all.arp_announce": "2",
                     # Where the switches mark, hosts ask for ECN on their connections (RFC 3168:
                     # gloo's TCP cuts its window on a mark); else the kernel's default (2): ECN
                     # only when the peer asks. The congestion control that reacts is the routes'
                     # (model/host_routing.py, HOST_TCP_CC).
                     "net.ipv4.tcp_ecn": "1" if fabric.ecn else "2",
                     # The twin's own listening ports (flows, probes) are never handed out as
                     # ephemeral source ports (flows, gloo), which would make a later bind fail.
                     "net.ipv4.ip_local_reserved_ports": TWIN_PORTS}


def host_tcp_queue_bytes(fabric: Fabric) -> int:
    return max(4 * frame_bytes(fabric.mtu), line_bytes(fabric.rate_bps, 2.0))


def configure_sysctls(netns_path: str, fabric: Fabric, node: Node) -> None:
    write_sysctls(netns_path, node_sysctls(fabric, node))


# Encoded once (nlbatch.py) with this address, written over with each port's own.
ADDRESS_SENTINEL = IPv4Address("10.250.251.252")
PREFIXLEN_OFFSET = nlbatch.HEADER.size + 1  # ifaddrmsg: family, prefixlen, flags, scope, index


@lru_cache(maxsize=8)
def _link_up(mtu: int | None) -> list[bytes]:
    return nlbatch.encode(lambda batch: batch.link("set", index=0, state="up", **({"mtu": mtu} if mtu else {})))


@lru_cache(maxsize=1)
def _address_template() -> bytes:
    [message] = nlbatch.encode(lambda batch: batch.addr("add", index=0, address=str(ADDRESS_SENTINEL), prefixlen=32))
    if message.count(ADDRESS_SENTINEL.packed) != 2:  # IFA_LOCAL and IFA_ADDRESS
        raise ValueError("the address request does not carry the address as expected")
    return message


def address_request(address: IPv4Interface) -> list[bytes]:
    message = bytearray(_address_template().replace(ADDRESS_SENTINEL.packed, address.ip.packed))
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
        sender.add(address_request(end.address), index, f"{end.ifname} address {end.address}")
        indexes[end.ifname] = index
    return indexes


def configure_host_routing(ipr: IPRoute, fabric: Fabric, node: Node, indexes: dict[str, int]) -> None:
    """The host's per-NIC routes and rules (model/host_routing.py), as netlink."""
    cc = {"cc_algo": HOST_TCP_CC}
    for item in host_routing(fabric, node):
        match item:
            case HostRoute(destination, gateway, dev, table):
                in_table = {"table": table} if table is not None else {}
                ipr.route("add", dst=destination, gateway=gateway, oif=indexes[dev], proto=ROUTE_PROTOCOL, metrics=cc,
                          **in_table)
            case HostRule(priority, table, source, uid):
                selector = {"src": source, "src_len": 32} if source else {"uid_range": f"{uid}:{uid}"}
                ipr.rule("add", table=table, priority=priority, **selector)
