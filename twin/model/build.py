"""Lab spec -> Fabric, in small named steps (nodes, wiring, interfaces, addresses, ASNs, graph).

Addressing plan (IPv4, identical in every lab; labs never share a namespace):
  switch loopbacks   10.255.0.0/16, one /32 each
  fabric links       10.0.0.0/16, one /31 per switch-switch link (upper tier gets the even address)
  host NIC links     10.<rail>.0.0/16, one /31 per host NIC (leaf even, host odd)
  dual-port NICs     (fabric.nic_ports: 2) each NIC's address, a /32 of 10.<rail>.128.0/17 held by both
                     its ports; its two leaves' ports take the even (leaf -a) and odd (-b) address of
                     a /31 of 10.<rail>.0.0/17. Every port is point to point (address, peer /32), so
                     a leaf's connected route to the NIC's address goes when its port loses carrier
                     and BGP withdraws it, as dual-ToR fabrics announce their hosts' routes.
ASN plan (RFC 7938 with RFC 6996 private ASNs), 2-byte while they suffice (488 leaves):
  superspine tier 65000; spine plane r 65100+r (3-tier) or all spines 65100 (2-tier);
  leaf i 64512+i (one per leaf).
4-byte (more leaves, or `routing.asn_plan: 4-byte`): the same shape from 4200000000:
  superspines 4200000000, spine plane r 4200000000+r, leaf i 4201000000+i.
"""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import IPv4Interface, IPv4Network

from twin.errors import LabFileError, Problem
from twin.model.buffers import setting_problems
from twin.model.fabric import IFNAMSIZ, Endpoint, Fabric, Link, Node
from twin.spec.labfile import LabFile, ecn_on, fits_two_byte_asns
from twin.units import parse_rate_bps, parse_size_bytes, parse_time_s

LOOPBACKS = IPv4Network("10.255.0.0/16")
FABRIC_LINKS = IPv4Network("10.0.0.0/16")
SUPERSPINE_ASN = 65000
SPINE_ASN_BASE = 65100
LEAF_ASN_BASE = 64512
ASN_PLANS = {  # superspine, spine base, leaf base
    "2-byte": (SUPERSPINE_ASN, SPINE_ASN_BASE, LEAF_ASN_BASE),
    "4-byte": (4_200_000_000, 4_200_000_000, 4_201_000_000),
}


def rail_network(rail: int) -> IPv4Network:
    return IPv4Network(f"10.{rail}.0.0/16")


def host_name(group: int, host: int) -> str:
    return f"host-g{group}-h{host}"


def leaf_name(group: int, rail: int, side: str = "") -> str:
    """leaf-gG-rR, or leaf-gG-rR-a / -b: the two leaves of a rail in a dual-port NIC fabric."""
    return f"leaf-g{group}-r{rail}" + (f"-{side}" if side else "")


def leaf_sides(nic_ports: int) -> tuple[str, ...]:
    """The leaves a group has on each rail, by side: one unnamed, or a and b for dual-port NICs."""
    return ("",) if nic_ports == 1 else ("a", "b")


def nic_port_name(rail: int, side: str = "") -> str:
    """A host's port to its leaf of `side`: nicR, or nicRa / nicRb on a dual-port NIC."""
    return f"nic{rail}{side}"


def spine_name(tiers: int, rail: int, spine: int, side: str = "") -> str:
    """spine-rR-sN (3-tier) or spine-N, and -a / -b on the two planes of a dual-plane fabric."""
    return (f"spine-r{rail}-s{spine}" if tiers == 3 else f"spine-{spine}") + (f"-{side}" if side else "")


def spine_sides(dual_plane: bool) -> tuple[str, ...]:
    """The planes a rail's spines are on: one unnamed, or a and b (fabric.dual_plane)."""
    return ("a", "b") if dual_plane else ("",)


def superspine_name(index: int) -> str:
    return f"superspine-{index}"


def short_name(node: Node) -> str:
    """Compact peer name used for interface names: leaf-g1-r3 -> lf-g1r3."""
    if node.role == "host":
        return f"hs-g{node.group}h{node.index}"
    if node.role == "leaf":
        return f"lf-g{node.group}r{node.rail}{node.side}"
    if node.role == "spine":
        return (f"sp-r{node.rail}s{node.index}" if node.rail else f"sp-{node.index}") + node.side
    return f"ss-{node.index}"


def add_nodes(fabric: Fabric, lab: LabFile) -> None:
    spec = lab.spec.fabric
    for group in range(1, spec.groups + 1):
        for host in range(1, spec.hosts_per_group + 1):
            _add(fabric, Node(host_name(group, host), "host", group=group, index=host))
        for rail in range(1, spec.rails + 1):
            for side in leaf_sides(spec.nic_ports):
                _add(fabric, Node(leaf_name(group, rail, side), "leaf", group=group, rail=rail, side=side))
    if spec.tiers == 3:
        for rail in range(1, spec.rails + 1):
            for side in spine_sides(spec.dual_plane):
                for spine in range(1, spec.spines_per_plane + 1):
                    _add(fabric, Node(spine_name(3, rail, spine, side), "spine", rail=rail, index=spine, side=side))
        for index in range(1, (spec.superspines or 0) + 1):
            _add(fabric, Node(superspine_name(index), "superspine", index=index))
    else:
        for side in spine_sides(spec.dual_plane):
            for spine in range(1, spec.spines_per_plane + 1):
                _add(fabric, Node(spine_name(2, 0, spine, side), "spine", index=spine, side=side))


def _add(fabric: Fabric, node: Node) -> None:
    fabric.nodes[node.name] = node


def wire(fabric: Fabric, lab: LabFile) -> None:
    """Host NIC r -> leaf (g, r) (each port of a dual-port NIC to its side's leaf); leaf -> spines (of
    its rail plane in 3-tier; of its side on a dual-plane fabric); spine -> superspines."""
    spec = lab.spec.fabric
    for leaf in fabric.by_role("leaf"):
        for host in range(1, spec.hosts_per_group + 1):
            fabric.links.append(Link(Endpoint(leaf.name), Endpoint(host_name(leaf.group, host)),
                                     "host", rail=leaf.rail))
    for leaf in fabric.by_role("leaf"):
        for spine in fabric.by_role("spine"):
            if (spec.tiers == 2 or spine.rail == leaf.rail) and spine.side in ("", leaf.side):
                fabric.links.append(Link(Endpoint(spine.name), Endpoint(leaf.name), "fabric"))
    for spine in fabric.by_role("spine"):
        for superspine in fabric.by_role("superspine"):
            fabric.links.append(Link(Endpoint(superspine.name), Endpoint(spine.name), "fabric"))


def name_interfaces(fabric: Fabric, lab: LabFile) -> None:
    """Switch ports are named after their peer; host NICs are nic1..nicN by rail."""
    too_long = []
    for link in fabric.links:
        for end, other in ((link.a, link.b), (link.b, link.a)):
            node = fabric.nodes[end.node]
            far = fabric.nodes[other.node]
            end.ifname = nic_port_name(link.rail, far.side) if node.role == "host" else short_name(far)
            if len(end.ifname) > IFNAMSIZ:
                too_long.append(f"{end.node}:{end.ifname}")
    if too_long:
        raise LabFileError([Problem(str(lab.path), lab.line("fabric"), "fabric",
                                    f"interface names exceed {IFNAMSIZ} characters: {too_long[:3]}",
                                    "use smaller group/rail/host counts")])


def assign_addresses(fabric: Fabric, lab: LabFile) -> None:
    switches = fabric.switches
    for number, node in enumerate(switches, start=1):
        node.loopback = LOOPBACKS[number]
    fabric_pairs = FABRIC_LINKS.subnets(new_prefix=31)
    rail_pairs = {rail: rail_network(rail).subnets(new_prefix=31) for rail in range(1, fabric.rails + 1)}
    if fabric.nic_ports == 2:
        _assign_dual_port(fabric)
    for link in fabric.links:
        if link.kind == "host" and fabric.nic_ports == 2:
            continue
        pool = rail_pairs[link.rail] if link.kind == "host" else fabric_pairs
        net = next(pool)
        link.a.address = IPv4Interface(f"{net[0]}/31")
        link.b.address = IPv4Interface(f"{net[1]}/31")


def _assign_dual_port(fabric: Fabric) -> None:
    """A dual-port NIC's address, on both its ports, and its leaves' port addresses (module doc)."""
    ports = {rail: next(rail_network(rail).subnets(new_prefix=17)).subnets(new_prefix=31)
             for rail in range(1, fabric.rails + 1)}
    nic_numbers = {rail: 0 for rail in range(1, fabric.rails + 1)}
    for (_host, rail), links in fabric.links_by_nic().items():
        pair = next(ports[rail])
        address = rail_network(rail)[(1 << 15) + nic_numbers[rail]]
        nic_numbers[rail] += 1
        for link in links:
            leaf_address = pair[0] if fabric.nodes[link.a.node].side == "a" else pair[1]
            link.a.address = IPv4Interface(f"{leaf_address}/32")
            link.b.address = IPv4Interface(f"{address}/32")


def asn_plan(lab: LabFile) -> str:
    chosen = lab.spec.routing.asn_plan
    if chosen == "auto":
        return "2-byte" if fits_two_byte_asns(lab.spec.fabric) else "4-byte"
    return chosen


def assign_asns(fabric: Fabric, lab: LabFile) -> None:
    superspine_asn, spine_base, leaf_base = ASN_PLANS[asn_plan(lab)]
    for number, leaf in enumerate(fabric.by_role("leaf")):
        leaf.asn = leaf_base + number
    for spine in fabric.by_role("spine"):
        spine.asn = spine_base + (spine.rail or 0)
    for superspine in fabric.by_role("superspine"):
        superspine.asn = superspine_asn


def make_graph(fabric: Fabric, lab: LabFile | None) -> None:
    for node in fabric.nodes.values():
        fabric.graph.add_node(node.name, role=node.role, group=node.group, rail=node.rail)
    for link in fabric.links:
        fabric.graph.add_edge(link.a.node, link.b.node, kind=link.kind, link=link)


def check_buffers(fabric: Fabric, lab: LabFile) -> None:
    """Queue settings that no port can honour as written are refused (never adjusted)."""
    found = setting_problems(fabric)
    if found:
        raise LabFileError([Problem(str(lab.path), lab.line("links", key), f"links.{key}", message, hint)
                            for key, message, hint in found])


BuildStep = Callable[[Fabric, LabFile], None]
STEPS: list[tuple[str, BuildStep]] = [
    ("nodes", add_nodes),
    ("wiring", wire),
    ("interfaces", name_interfaces),
    ("addressing", assign_addresses),
    ("asns", assign_asns),
    ("graph", make_graph),
    ("buffers", check_buffers),
]


def build_fabric(lab: LabFile) -> Fabric:
    spec = lab.spec
    fabric = Fabric(
        name=spec.name, tiers=spec.fabric.tiers, groups=spec.fabric.groups, rails=spec.fabric.rails,
        rate_bps=parse_rate_bps(spec.links.rate), mtu=spec.links.mtu, nic_ports=spec.fabric.nic_ports,
        dual_plane=spec.fabric.dual_plane,
        delay_s=parse_time_s(spec.links.delay) if spec.links.delay else None,
        bfd_interval_ms=spec.routing.bfd.interval_ms, bfd_multiplier=spec.routing.bfd.multiplier,
        ecmp_hash=spec.routing.ecmp_hash, runtime=spec.runtime,
        pfc=spec.links.pfc, pfc_watchdog_ms=spec.links.pfc_watchdog_ms,
        buffer_bytes=parse_size_bytes(spec.links.buffer) if spec.links.buffer else None,
        pfc_xoff_bytes=parse_size_bytes(spec.links.pfc_xoff) if spec.links.pfc_xoff else None,
        pfc_xon_bytes=parse_size_bytes(spec.links.pfc_xon) if spec.links.pfc_xon else None,
        ecn=ecn_on(spec.links),
        ecn_kmin_bytes=parse_size_bytes(spec.links.ecn_kmin) if spec.links.ecn_kmin else None,
        ecn_kmax_bytes=parse_size_bytes(spec.links.ecn_kmax) if spec.links.ecn_kmax else None,
        ecn_pmax=spec.links.ecn_pmax,
        load_balance=spec.routing.load_balance,
        flowlet_gap_s=parse_time_s(spec.routing.flowlet_gap) if spec.routing.flowlet_gap else None,
        hash_offset=spec.routing.hash_offset,
        host_routes=spec.routing.host_routes,
        lldp=spec.lldp,
        bfd_offload=spec.routing.bfd.offload and spec.runtime == "netns",
    )
    for _name, step in STEPS:
        step(fabric, lab)
    return fabric.freeze()


