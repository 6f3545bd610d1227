"""link_down: both ends of a link go down; routing reacts through link-down events.

Always both ends: on Ethernet a port that stops hearing its peer signals a remote fault, and the
peer's port goes down too (IEEE 802.3 link fault signalling), as a veth's peer loses its carrier.
A cut that loses one direction while both ports stay up is a silent drop (`silent_drop`,
`loss_pct: 100`, `direction`)."""

from __future__ import annotations

from twin.faults.base import FaultContext, LinkParams, OnLink
from twin.faults.netlink import restore_routes, set_link_state, static_routes
from twin.model.targets import resolve_link


class LinkDown(OnLink):
    name = "link_down"
    params = LinkParams
    training_level = 1
    one_end_suffices = True  # on a split lab's crossing link, this machine's end (engine._on_this_machine)

    def check(self, fabric, params, lasts_s):
        if params.direction != "both":
            return [("direction", f"a link goes down in both directions (direction: {params.direction}): a port "
                     "that stops hearing its peer takes the peer's port down too (Ethernet's link fault signalling)",
                     "leave direction out; for one direction lost while both ports stay up, use silent_drop with "
                     "loss_pct: 100 and this direction")]
        return []

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"link": rng.choice(links)}

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        link, _a, _b = resolve_link(ctx.lab.fabric, params.link)
        ends = _ends_here(ctx, link)
        # Admin-down flushes routes through the device; host per-NIC routes must come back on clear.
        record["routes"] = {end.node: static_routes(ctx, end.node, end.ifname) for end in ends}
        for end in ends:
            set_link_state(ctx, end.node, end.ifname, up=False)

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        link, _a, _b = resolve_link(ctx.lab.fabric, params.link)
        for end in _ends_here(ctx, link):
            set_link_state(ctx, end.node, end.ifname, up=True)
        for node, routes in record.get("routes", {}).items():
            restore_routes(ctx, node, routes)


def _ends_here(ctx: FaultContext, link) -> list:
    """The link's ends this machine runs: both, but one on a split lab's link to another machine,
    whose far end then stops hearing it (BFD takes that end's session down, as after a cut fibre)."""
    return [end for end in (link.a, link.b) if ctx.lab.fabric.runs_here(end.node)]
