"""What a converged fabric must look like: ECMP next-hop counts derived from the graph.

eBGP with multipath-relax installs every neighbour that lies on a shortest path
(AS-path length equals hop count in this wiring, and the ASN plan rejects the
longer valley paths). Hosts do not forward, so paths run over switches only.
"""

from __future__ import annotations

from ipaddress import IPv4Network

import networkx as nx

from twin.model.fabric import Fabric


def host_prefixes(fabric: Fabric) -> dict[IPv4Network, str]:
    """Each host NIC /31 and the leaf it hangs off."""
    return {link.network: link.a.node for link in fabric.links if link.kind == "host"}


def expected_next_hops(fabric: Fabric) -> dict[str, dict[IPv4Network, int]]:
    """switch -> host prefix -> number of ECMP next hops (connected prefixes left out)."""
    switches = fabric.switch_graph()
    distance = {leaf.name: nx.single_source_shortest_path_length(switches, leaf.name)
                for leaf in fabric.by_role("leaf")}
    expected: dict[str, dict[IPv4Network, int]] = {}
    for switch in fabric.switches:
        per_prefix = {}
        for prefix, leaf in host_prefixes(fabric).items():
            if leaf == switch.name:
                continue
            dist = distance[leaf]
            per_prefix[prefix] = sum(1 for peer in switches.neighbors(switch.name)
                                     if dist.get(peer) == dist[switch.name] - 1)
        expected[switch.name] = per_prefix
    return expected
