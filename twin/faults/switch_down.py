"""switch_down: a switch dies (FRR daemons stop, every port goes down). Clearing brings the
ports back, restarts FRR from the same configs, waits for BGP and binds BFD again."""

from __future__ import annotations

from pydantic import Field

from twin.faults.base import FaultContext, OnNode, Params
from twin.faults.netlink import set_link_state
from twin.lab.routing import frr
from twin.lab.routing.converge import wait_routes_of_neighbours
from twin.model.targets import resolve_node

SWITCH_ROLES = ("leaf", "spine", "superspine")


class SwitchDownParams(Params):
    node: str = Field(description="the switch that dies")


class SwitchDown(OnNode):
    name = "switch_down"
    params = SwitchDownParams
    training_level = 1
    roles = SWITCH_ROLES

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"node": rng.choice(sorted(n.name for n in fabric.by_role("spine")))}

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node = record["node"] = resolve_node(ctx.lab.fabric, params.node, roles=SWITCH_ROLES)
        frr.stop_node(ctx.lab, node)
        ends = [link.endpoint(node) for link in ctx.lab.fabric.links_of(node)]
        for end in ends:
            set_link_state(ctx, node, end.ifname, up=False)
        # Hosts behind a dead leaf keep their routes (only carrier is lost on their side).

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        """Its switch ports first, FRR and BGP; its host ports once it routes what its neighbours
        route (a dual-port NIC would send into a leaf with no routes yet, and the packets it lost
        there cost an RC QP a retransmission timeout: 4.3 s at NCCL's default)."""
        node = record["node"]
        links = ctx.lab.fabric.links_of(node)
        for link in links:
            if link.kind == "fabric":
                set_link_state(ctx, node, link.endpoint(node).ifname, up=True)
        frr.restart_node(ctx.lab, ctx.lab.fabric.nodes[node])
        if any(link.kind == "host" for link in links):
            wait_routes_of_neighbours(ctx.lab, node)
        for link in links:
            if link.kind == "host":
                set_link_state(ctx, node, link.endpoint(node).ifname, up=True)
