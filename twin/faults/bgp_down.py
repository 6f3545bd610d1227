"""bgp_down: one BGP session is shut on one side, as a misconfiguration would; links stay up."""

from __future__ import annotations

from pydantic import Field

from twin.lab.frr import configure_bgp
from twin.faults import register
from twin.faults.base import FaultContext, OnLink, Params, TargetError, resolve_link


class BgpDownParams(Params):
    link: str = Field(description='the session\'s link; shut on the first node: "a -- b"')


def _session(ctx: FaultContext, params):
    link, a, b = resolve_link(ctx.fabric, params.link)
    if not (ctx.fabric.nodes[a].is_switch and ctx.fabric.nodes[b].is_switch):
        raise TargetError(f"{params.link} carries no BGP session", hint="hosts do not run BGP")
    return ctx.fabric.nodes[a], str(link.peer(a).address.ip)


class BgpDown(OnLink):
    name = "bgp_down"
    params = BgpDownParams

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, peer = _session(ctx, params)
        record.update(node=node.name, peer=peer)
        configure_bgp(ctx.runtime, ctx.state, node, f"neighbor {peer} shutdown")

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, peer = _session(ctx, params)
        configure_bgp(ctx.runtime, ctx.state, node, f"no neighbor {peer} shutdown")


register(BgpDown())
