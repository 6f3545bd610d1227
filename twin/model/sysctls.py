"""The sysctls of a lab's nodes: what the model intends, for the lab's kernel setup
(lab/kernel/netconf.py), the containerlab export and config-audit alike."""

from __future__ import annotations

import zlib

from twin.model.buffers import frame_bytes, line_bytes
from twin.model.fabric import Fabric, Node

TWIN_PORTS = "47000-47199"  # fixed ports of traffic.py, workloads/flows.py, probes/mesh.py

# The kernel's ECMP hash fields: 0 hashes addresses, 1 the 5-tuple (faults/hash_policy.py changes
# it on one switch; config-audit and the restoration snapshot read it).
HASH_POLICY_SYSCTL = "net.ipv4.fib_multipath_hash_policy"
HASH_POLICIES = {"l3": "0", "l4": "1"}


def node_sysctls(fabric: Fabric, node: Node, machine: dict[str, str] | None = None) -> dict[str, str]:
    """What a node's kernel is set to; `machine`: settings that depend on the machine it runs on
    (lab/kernel/netconf.py, in_order_delivery), which the model cannot know."""
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
    } | (machine or {})
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
    return common | host_arp(fabric) | {"net.ipv4.ip_forward": "0",
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


def host_arp(fabric: Fabric) -> dict[str, str]:
    """Multi-NIC host: answer ARP only on the NIC that owns the address. Not on dual-port NICs:
    their ports are point to point (address, peer), which arp_ignore=1 cannot match (it looks for
    the asked address in the port's subnets, and a port's "subnet" is its leaf's /32), so a leaf
    that had lost its neighbour entry (its ports went down) could not reach the NIC again; and
    arp_filter checks the route back to the asker, which the NIC's own table spreads over both
    ports. A port there has one neighbour, its leaf, which asks only for the NIC's address."""
    return {"net.ipv4.conf.all.arp_ignore": "1" if fabric.nic_ports == 1 else "0"}


def host_tcp_queue_bytes(fabric: Fabric) -> int:
    return max(4 * frame_bytes(fabric.mtu), line_bytes(fabric.rate_bps, 2.0))
