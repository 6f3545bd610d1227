"""ecmp_width: one switch's BGP multipath cut to max_paths (`maximum-paths`), as a template with
the wrong value: its ECMP groups shrink, the links it stops using idle while the others carry
their share, and nothing is down."""

from __future__ import annotations

import re

from pydantic import Field

from twin.faults.base import FaultContext, OnNode, Params
from twin.lab.routing.frr import bgpd_running_config, configure_bgp
from twin.model.ecmp import expected_next_hops

MAXIMUM_PATHS = re.compile(r"^\s+maximum-paths (\d+)\s*$")  # eBGP's; `maximum-paths ibgp N` is not


class EcmpWidthParams(Params):
    node: str = Field(description="the switch")
    max_paths: int = Field(ge=1, le=256, description="the multipath width pushed, below the switch's widest group")


def widest_group(fabric, node: str) -> int:
    """The most next hops the switch installs for one host prefix when converged."""
    return max(expected_next_hops(fabric)[node].values(), default=0)


class EcmpWidth(OnNode):
    name = "ecmp_width"
    params = EcmpWidthParams
    roles = ("leaf", "spine", "superspine")
    training_level = 4

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        wide = sorted(n.name for n in fabric.switches if widest_group(fabric, n.name) > 1)
        return {"node": rng.choice(wide), "max_paths": 1}

    def check(self, fabric, params, lasts_s):
        width = widest_group(fabric, params.node)
        if params.max_paths >= width:
            return [("max_paths", f"{params.node}'s widest ECMP group has {width} next hop(s): max_paths "
                     f"{params.max_paths} changes nothing", "push fewer paths than that, e.g. 1"
                     if width > 1 else "name a switch with more than one path to a host (a leaf or a spine)")]
        return []

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node = ctx.lab.fabric.nodes[params.node]
        prior = [int(m.group(1)) for m in map(MAXIMUM_PATHS.match, bgpd_running_config(ctx.lab, node)) if m]
        record["prior_max_paths"] = prior[0] if prior else None  # None: FRR's default, no line
        configure_bgp(ctx.lab, node, "address-family ipv4 unicast",
                      f"maximum-paths {params.max_paths}")

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        prior = record["prior_max_paths"]
        configure_bgp(ctx.lab, ctx.lab.fabric.nodes[params.node], "address-family ipv4 unicast",
                      f"maximum-paths {prior}" if prior is not None else "no maximum-paths")
