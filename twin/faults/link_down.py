"""link_down: both ends of a link go down; routing reacts through link-down events."""

from __future__ import annotations

from twin.faults.base import FaultContext, LinkParams, OnLink
from twin.faults.netlink import restore_routes, set_link_state, static_routes
from twin.model.targets import resolve_link


class LinkDown(OnLink):
    name = "link_down"
    params = LinkParams
    training_level = 1

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"link": rng.choice(links)}

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        link, _a, _b = resolve_link(ctx.lab.fabric, params.link)
        ends = [link.a, link.b]
        # Admin-down flushes routes through the device; host per-NIC routes must come back on clear.
        record["routes"] = {end.node: static_routes(ctx, end.node, end.ifname) for end in ends}
        for end in ends:
            set_link_state(ctx, end.node, end.ifname, up=False)

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        link, _a, _b = resolve_link(ctx.lab.fabric, params.link)
        for end in (link.a, link.b):
            set_link_state(ctx, end.node, end.ifname, up=True)
        for node, routes in record.get("routes", {}).items():
            restore_routes(ctx, node, routes)
