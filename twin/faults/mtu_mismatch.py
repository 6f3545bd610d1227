"""mtu_mismatch: one end of a link pushed to another MTU, as a change that missed one port: frames
bigger than the smaller end's MTU die there (dropped on arrival, or refused on the way out with
"fragmentation needed"); small frames, BGP keepalives and BFD pass, so routing sees nothing."""

from __future__ import annotations

from pydantic import Field

from twin.faults.base import FaultContext, OnLink, Params
from twin.model.targets import TargetError, resolve_link

MIN_MTU = 576  # what every IPv4 host must accept (RFC 791); the kernel would take 68


class MtuMismatchParams(Params):
    link: str = Field(description='the link, e.g. "leaf-g1-r1 -- spine-r1-s1"')
    node: str = Field(description="the end whose port is pushed (one of the link's two nodes)")
    mtu: int = Field(ge=MIN_MTU, le=65535, description="the MTU pushed onto that port, e.g. 1500 on a 9000 lab")


def pushed_end(fabric, params):
    """The link's endpoint on `node`."""
    link, a, b = resolve_link(fabric, params.link)
    if params.node not in (a, b):
        raise TargetError(f"{params.node} is not an end of {params.link}", hint=f"name {a} or {b}", key="node")
    return link.endpoint(params.node)


class MtuMismatch(OnLink):
    name = "mtu_mismatch"
    params = MtuMismatchParams
    training_level = 4

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        link = rng.choice(links)
        return {"link": link, "node": rng.choice(link.split(" -- ")), "mtu": 1500 if fabric.mtu > 1500 else 1280}

    def targets(self, fabric, params):
        pushed_end(fabric, params)  # checked when the scenario loads
        return super().targets(fabric, params)

    def check(self, fabric, params, lasts_s):
        if params.mtu == fabric.mtu:
            return [("mtu", f"mtu {params.mtu} is the lab's own MTU: nothing would mismatch",
                     f"push another value, e.g. {1500 if fabric.mtu != 1500 else 9000}")]
        return []

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        end = pushed_end(ctx.lab.fabric, params)
        with ctx.lab.netlink(end.node) as ipr:
            index = ipr.link_lookup(ifname=end.ifname)[0]
            record.update(node=end.node, ifname=end.ifname, prior_mtu=ipr.get_links(index)[0].get_attr("IFLA_MTU"))
            ipr.link("set", index=index, mtu=params.mtu)

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        with ctx.lab.netlink(record["node"]) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname=record["ifname"])[0], mtu=record["prior_mtu"])
