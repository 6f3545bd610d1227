"""route_filter: a bad outbound route map on one switch stops it advertising a host prefix (or
every NIC prefix of a host) to its BGP neighbours, as a policy push with a wrong entry: at a leaf
the host becomes unreachable from every other leaf; at a spine the fabric loses that spine's paths
toward it; BGP sessions stay up. On a lab whose leaves announce summaries (`host_routes: leaf`),
a host's /31 is never advertised alone: the filter takes the summary that covers it, and every
host behind that leaf is cut off, as a bad entry for a ToR's subnet does."""

from __future__ import annotations

from ipaddress import IPv4Network

from pydantic import Field

from twin.faults.base import FaultContext, OnNode
from twin.faults.blackhole import PrefixOrHost, prefixes
from twin.lab.routing.frr import configure_bgp, configure_bgpd
from twin.model.ecmp import prefix_leaves

# The lab's sessions share one peer group (templates/frr/bgpd.conf.j2): the map is set on it.
PEER_GROUP = "FABRIC"


class RouteFilterParams(PrefixOrHost):
    node: str = Field(description="the switch whose advertisements of the prefix are filtered")


def policy_name(fault_id: str) -> str:
    """The prefix list and route map the fault adds, named after it (fault ids are [a-z0-9_-])."""
    return f"FTW-FILTER-{fault_id}"


def advertised(fabric, wanted: list[str]) -> list[str]:
    """The prefixes BGP advertises that carry `wanted`: each one itself, or the leaf's summary that
    covers it (`host_routes: leaf`), each once."""
    routed = prefix_leaves(fabric)
    found: list[str] = []
    for prefix in map(IPv4Network, wanted):
        cover = next((str(each) for each in routed if prefix != each and prefix.subnet_of(each)), str(prefix))
        if cover not in found:
            found.append(cover)
    return found


class RouteFilter(OnNode):
    name = "route_filter"
    params = RouteFilterParams
    roles = ("leaf", "spine", "superspine")
    training_level = 4

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        host = rng.choice(sorted(n.name for n in fabric.hosts))
        leaves = sorted({link.peer(host).node for link in fabric.links_of(host)})
        return {"node": rng.choice(leaves), "host": host}

    def targets(self, fabric, params):
        prefixes(fabric, params)  # checked when the scenario loads
        return super().targets(fabric, params)

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, name = ctx.lab.fabric.nodes[params.node], policy_name(fault_id)
        record.update(policy=name, prefixes=advertised(ctx.lab.fabric, prefixes(ctx.lab.fabric, params)))
        entries = [f"ip prefix-list {name} seq {5 * (n + 1)} permit {prefix}"
                   for n, prefix in enumerate(record["prefixes"])]
        configure_bgpd(ctx.lab, node, *entries, f"route-map {name} deny 10",
                       f"match ip address prefix-list {name}", "exit", f"route-map {name} permit 20", "exit")
        configure_bgp(ctx.lab, node, "address-family ipv4 unicast",
                      f"neighbor {PEER_GROUP} route-map {name} out")

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, name = ctx.lab.fabric.nodes[params.node], record["policy"]
        configure_bgp(ctx.lab, node, "address-family ipv4 unicast",
                      f"no neighbor {PEER_GROUP} route-map {name} out")
        configure_bgpd(ctx.lab, node, f"no route-map {name}", f"no ip prefix-list {name}")
