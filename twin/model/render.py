"""Render per-daemon FRR configs for a switch from the model (jinja2 templates)."""

from __future__ import annotations

from functools import lru_cache
from ipaddress import IPv4Network

import jinja2

from twin.model.build import FABRIC_LINKS
from twin.model.daemons import DAEMONS
from twin.model.ecmp import leaf_summaries
from twin.model.fabric import Fabric, Node
from twin.units import period_within


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("twin", "templates/frr"),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)


def bgp_neighbors(fabric: Fabric, node: Node) -> list[dict]:
    """Every switch neighbour of `node`: its address on the shared link and its ASN."""
    neighbors = []
    for link in fabric.links_of(node.name):
        peer = fabric.nodes[link.peer(node.name).node]
        if peer.is_switch:
            neighbors.append({"address": str(link.peer(node.name).address.ip), "asn": peer.asn,
                              "name": peer.name, "ifname": link.endpoint(node.name).ifname})
    return neighbors


BGP_KEEPALIVE_S = 3  # FRR's datacenter profile: keepalive 3 s, hold 9 s
MAX_BGP_KEEPALIVE_S = 60  # FRR's traditional profile (hold 180 s)
# bgpd's cost at rest per session end and keepalive a second, measured on pod128 (0.224 of a core
# for its 4,096 session ends at one keepalive every 3 s, 0.69 at one a second; lab/idle.py), and
# the share of the machine the lab's keepalives may take.
BGP_CORES_PER_SESSION_KEEPALIVE = 0.164e-3
BGP_KEEPALIVE_CORES = 0.1


def session_ends(fabric: Fabric) -> int:
    """BGP's (and BFD's) sessions counted at both ends: one per switch-to-switch link (hosts route
    statically)."""
    return 2 * sum(1 for link in fabric.links if link.kind == "fabric")


def bgp_keepalive_s(fabric: Fabric) -> int:
    """BGP keepalive (hold = 3x): FRR's datacenter profile's 3 s, or BFD's detection time when that
    is longer, or on a big lab the shortest that keeps its keepalives within BGP_KEEPALIVE_CORES
    (pod128 7 s, AIPod 24 s, at most FRR's traditional 60 s). BFD is bound to every fabric session
    and sees a failure within its detection time; BGP's hold timer is only the fallback should BFD
    itself fail, as in fabrics that run BFD with BGP's timers long. At 3 s AIPod's 14,336 session
    ends took 0.8 of a core, and under the bring-up's load their hold timers expired."""
    detect_s = fabric.bfd_interval_ms * fabric.bfd_multiplier / 1000
    affordable_s = int(period_within(session_ends(fabric) * BGP_CORES_PER_SESSION_KEEPALIVE, BGP_KEEPALIVE_CORES))
    return min(MAX_BGP_KEEPALIVE_S, max(BGP_KEEPALIVE_S, int(detect_s), affordable_s))


def multipath_width(fabric: Fabric, node: Node) -> int:
    """The switch's `maximum-paths`: one per neighbour (every one may lie on a shortest path), at
    least 2."""
    return max(len(bgp_neighbors(fabric, node)), 2)


def host_summaries(fabric: Fabric, node: Node) -> list[IPv4Network]:
    """The prefixes a leaf announces for its host links instead of each /31 (`host_routes: leaf`;
    none otherwise): `aggregate-address ... summary-only` over the redistributed connected routes,
    so a summary stays while any of its host links is up."""
    if fabric.host_routes != "leaf" or node.role != "leaf":
        return []
    return leaf_summaries(fabric).get(node.name, [])


def render_switch(fabric: Fabric, node: Node, held: bool = False) -> dict[str, str]:
    """daemon name -> config text. `held`: the fabric sessions start shut down, for a lab to open
    once bgpd has learnt its interfaces (lab/routing/frr.py, release_sessions); exports leave them open."""
    neighbors = bgp_neighbors(fabric, node)
    context = {"fabric": fabric, "node": node, "neighbors": neighbors,
               "maximum_paths": multipath_width(fabric, node), "switch_links": FABRIC_LINKS,
               "keepalive_s": bgp_keepalive_s(fabric), "held": held, "summaries": host_summaries(fabric, node)}
    return {daemon.name: _env().get_template(f"{daemon.config}.j2").render(**context) for daemon in DAEMONS}


def render_bfd_binding(node: Node) -> list[str]:
    """vtysh commands that bind BFD (the lab's profile) to every fabric BGP session."""
    text = _env().get_template("bgpd-bfd.vtysh.j2").render(node=node)
    return [line for line in text.splitlines() if line.strip()]
