"""`twin lab show`: the model as plain, deterministic text (also the golden-file format)."""

from __future__ import annotations

from .model import Fabric
from .units import format_rate

ROLE_ORDER = {"superspine": 0, "spine": 1, "leaf": 2, "host": 3}


def describe(fabric: Fabric) -> str:
    lines = [
        f"lab {fabric.name}: {fabric.tiers}-tier, {fabric.groups} group(s), {fabric.rails} rail(s), "
        f"runtime {fabric.runtime}",
        f"links: {format_rate(fabric.rate_bps)}, mtu {fabric.mtu}; "
        f"BFD {fabric.bfd_interval_ms} ms x {fabric.bfd_multiplier}; ECMP hash {fabric.ecmp_hash}",
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
