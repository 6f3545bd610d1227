"""A host's per-NIC routing, as data: traffic sourced from NIC r leaves through NIC r, as on a real
multi-rail server. The bring-up sends it as netlink (lab/kernel/netconf.py), the containerlab export
writes it as `ip` commands (model/export.py): one plan, two spellings.

- rule `from <NIC r address> lookup 100+r`, table 100+r: default via leaf (g, r) (via both of its
  leaves, one next hop a port, for a dual-port NIC: a flow takes either port by the kernel's
  hash, and a port without carrier is skipped, sysctls.py ignore_routes_with_linkdown)
- rule `uidrange RANK_UID_BASE+r lookup 100+r`: collective ranks of rail r use their NIC
  (lab/identity.py: ranks of rail r run as that uid)
- main table: the rail-r block via NIC r (unbound traffic stays rail-aligned), default via NIC 1
Every route carries the hosts' TCP congestion control (HOST_TCP_CC).
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.model.build import rail_network
from twin.model.fabric import Fabric, Node

HOST_TABLE_BASE = 100  # table 100+r holds NIC r's default route
RANK_UID_BASE = 4_200_000_000  # far above any real account
# Hosts' TCP congestion control: Linux's own default, cubic, set on every host route (RTAX_CC_ALGO),
# not the machine's default, which namespaces inherit: BBR (this machine's) ignores ECN marks, so
# a marking fabric would not slow gloo down. A route's algorithm needs no place in the machine's
# tcp_allowed_congestion_control (a namespace's sysctl refuses one that is not there).
HOST_TCP_CC = "cubic"
DEFAULT = "0.0.0.0/0"
ROUTE_PROTOCOL = "static"  # who made the routes, as `ip route` shows them (a route made by hand)


def rank_uid(rail: int) -> int:
    return RANK_UID_BASE + rail


@dataclass(frozen=True)
class HostRoute:
    destination: str  # a prefix; DEFAULT for the default route
    nexthops: tuple[tuple[str, str], ...]  # (gateway, dev): one, or one per port of a dual-port NIC
    table: int | None = None  # None: the main table


@dataclass(frozen=True)
class HostRule:
    priority: int
    table: int
    source: str | None = None  # from <address>/32
    uid: int | None = None  # uidrange <uid>-<uid>


def host_routing(fabric: Fabric, node: Node) -> list[HostRoute | HostRule]:
    """The host's routes and rules, in the order they are made."""
    ports: dict[int, list] = {}
    for link in sorted(fabric.links_of(node.name), key=lambda link: (link.rail, link.endpoint(node.name).ifname)):
        ports.setdefault(link.rail, []).append(link)
    plan: list[HostRoute | HostRule] = []
    for rail, links in sorted(ports.items()):
        table = HOST_TABLE_BASE + rail
        nexthops = tuple((str(link.peer(node.name).address.ip), link.endpoint(node.name).ifname) for link in links)
        plan += [HostRoute(DEFAULT, nexthops, table),
                 HostRule(1000 + rail, table, source=str(links[0].endpoint(node.name).address.ip)),
                 HostRule(900 + rail, table, uid=rank_uid(rail)),
                 HostRoute(str(rail_network(rail)), nexthops)]
    first = next(item for item in plan if isinstance(item, HostRoute))
    plan.append(HostRoute(DEFAULT, first.nexthops))
    return plan


def ip_commands(plan: list[HostRoute | HostRule]) -> list[str]:
    """`ip` commands that make `plan`."""
    commands = []
    for item in plan:
        match item:
            case HostRoute(destination, nexthops, table):
                where = "default" if destination == DEFAULT else destination
                in_table = f" table {table}" if table is not None else ""
                via = " ".join(("nexthop " if len(nexthops) > 1 else "") + f"via {gateway} dev {dev}"
                               for gateway, dev in nexthops)
                commands.append(f"ip route add {where}{in_table} proto {ROUTE_PROTOCOL} congctl {HOST_TCP_CC} {via}")
            case HostRule(priority, table, source, uid):
                selector = f"from {source}/32" if source else f"uidrange {uid}-{uid}"
                commands.append(f"ip rule add {selector} table {table} priority {priority}")
    return commands
