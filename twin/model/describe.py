"""`twin lab show`: the model as plain, deterministic text (also the golden-file format)."""

from __future__ import annotations

from twin.model import balance
from twin.model.buffers import for_port
from twin.model.fabric import Fabric
from twin.model.ports import ports
from twin.units import format_rate

ROLE_ORDER = {"superspine": 0, "spine": 1, "leaf": 2, "host": 3}


def describe(fabric: Fabric) -> str:
    lines = [
        f"lab {fabric.name}: {fabric.tiers}-tier, {fabric.groups} group(s), {fabric.rails} rail(s), "
        f"runtime {fabric.runtime}",
        f"links: {format_rate(fabric.rate_bps)}, mtu {fabric.mtu}; "
        f"BFD {fabric.bfd_interval_ms} ms x {fabric.bfd_multiplier}; ECMP hash {fabric.ecmp_hash}",
        queues(fabric),
        balance.describe(fabric),
        f"{len(fabric.switches)} switches, {len(fabric.hosts)} hosts, {len(fabric.links)} links",
        "",
        "nodes:",
    ]
    for node in sorted(fabric.nodes.values(), key=lambda n: (ROLE_ORDER[n.role], n.name)):
        if node.is_switch:
            lines.append(f"  {node.name:<16} {node.role:<10} AS {node.asn:<6} loopback {node.loopback}")
        else:
            nics = ", ".join(f"{link.b.ifname} {link.b.address}" for link in fabric.links_of(node.name))
            lines.append(f"  {node.name:<16} {node.role:<10} {nics}")
    lines += ["", "links:"]
    for link in fabric.links:
        lines.append(f"  {link.a.node}:{link.a.ifname} {link.a.address}  --  "
                     f"{link.b.node}:{link.b.ifname} {link.b.address}")
    return "\n".join(lines) + "\n"


def queues(fabric: Fabric) -> str:
    """One line: lossless or lossy, and the switch ports' thresholds and buffers."""
    limits = [for_port(fabric, p) for p in ports(fabric) if fabric.nodes[p.node].is_switch]
    buffers = sorted({t.buffer for t in limits})
    size = f"{buffers[0] // 1000} KB" if len(buffers) == 1 else f"{buffers[0] // 1000}-{buffers[-1] // 1000} KB"
    if not fabric.pfc:
        return f"queues: lossy (a full queue drops), buffer {size} per switch port"
    watchdog = f", watchdog {fabric.pfc_watchdog_ms} ms" if fabric.pfc_watchdog_ms else ""
    return (f"queues: lossless (PFC), xoff {limits[0].xoff // 1000} KB, xon {limits[0].xon // 1000} KB, "
            f"buffer {size} per switch port{watchdog}")
