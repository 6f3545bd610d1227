"""bgp_down: one BGP session is shut on one side, as a misconfiguration would; links stay up."""

from __future__ import annotations

from pydantic import Field

from twin.faults.base import FaultContext, OnLink, Params
from twin.lab.routing.frr import configure_bgp
from twin.model.targets import TargetError, resolve_link


class BgpDownParams(Params):
    link: str = Field(description='the session\'s link; shut on the first node: "a -- b"')


def session_of(fabric, params):
    link, a, b = resolve_link(fabric, params.link)
    if not (fabric.nodes[a].is_switch and fabric.nodes[b].is_switch):
        raise TargetError(f"{params.link} carries no BGP session",
                          hint="hosts do not run BGP: name a switch-to-switch link")
    return fabric.nodes[a], str(link.peer(a).address.ip)


def _session(ctx: FaultContext, params):
    return session_of(ctx.lab.fabric, params)


class BgpDown(OnLink):
    name = "bgp_down"
    params = BgpDownParams
    training_level = 1

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"link": rng.choice(links)}

    def targets(self, fabric, params):
        session_of(fabric, params)  # checked when the scenario loads, not after bring-up
        return super().targets(fabric, params)

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, peer = _session(ctx, params)
        record.update(node=node.name, peer=peer)
        configure_bgp(ctx.lab, node, f"neighbor {peer} shutdown")

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, peer = _session(ctx, params)
        configure_bgp(ctx.lab, node, f"no neighbor {peer} shutdown")
