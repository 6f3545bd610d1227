"""switch_down: a switch dies (FRR daemons stop, every port goes down). Clearing brings the
ports back, restarts FRR from the same configs, waits for BGP and binds BFD again."""

from __future__ import annotations

from pydantic import Field

from twin.lab import frr
from twin.faults import register
from twin.faults.base import FaultContext, Params, resolve_node
from twin.faults.netlink import set_link_state

SWITCH_ROLES = ("leaf", "spine", "superspine")


class SwitchDownParams(Params):
    node: str = Field(description="the switch that dies")


class SwitchDown:
    name = "switch_down"
    params = SwitchDownParams

    def targets(self, fabric, params):
        return [resolve_node(fabric, params.node, roles=SWITCH_ROLES)]

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node = record["node"] = resolve_node(ctx.fabric, params.node, roles=SWITCH_ROLES)
        frr.stop_node(ctx.state, node)
        ends = [link.endpoint(node) for link in ctx.fabric.links_of(node)]
        for end in ends:
            set_link_state(ctx, node, end.ifname, up=False)
        # Hosts behind a dead leaf keep their routes (only carrier is lost on their side).

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node = record["node"]
        for link in ctx.fabric.links_of(node):
            set_link_state(ctx, node, link.endpoint(node).ifname, up=True)
        frr.restart_node(ctx.runtime, ctx.state, ctx.fabric.nodes[node])


register(SwitchDown())
