"""peer_mismatch: one side of a BGP session configured with the wrong neighbour AS, as a typo in
a push: the session never establishes (the peer's OPEN names another AS), the link stays up and
BFD with it, and ECMP loses the member."""

from __future__ import annotations

from pydantic import Field

from twin.faults.base import FaultContext, OnLink, Params
from twin.faults.bgp_down import session_of
from twin.lab.routing.frr import configure_bgp
from twin.model.targets import resolve_link

PRIVATE_ASN_LAST = 4294967294  # RFC 6996's 32-bit private range ends here


class PeerMismatchParams(Params):
    link: str = Field(description='the session\'s link; the wrong AS is set on the first node: "a -- b"')
    asn: int | None = Field(None, ge=1, le=PRIVATE_ASN_LAST,
                            description="the wrong neighbour AS; omitted = one no switch of the lab has")


def wrong_asn(fabric, params) -> int:
    if params.asn is not None:
        return params.asn
    used = {node.asn for node in fabric.switches}
    return next(asn for asn in range(PRIVATE_ASN_LAST, 0, -1) if asn not in used)


class PeerMismatch(OnLink):
    name = "peer_mismatch"
    params = PeerMismatchParams
    training_level = 4

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"link": rng.choice(links)}

    def targets(self, fabric, params):
        session_of(fabric, params)  # checked when the scenario loads, not after bring-up
        return super().targets(fabric, params)

    def check(self, fabric, params, lasts_s):
        peer = far_end(fabric, params)
        if params.asn == peer.asn:
            return [("asn", f"asn {params.asn} is {peer.name}'s own AS: nothing would mismatch",
                     "omit asn, or give another")]
        return []

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, address = session_of(ctx.lab.fabric, params)
        record.update(node=node.name, peer=address, asn=wrong_asn(ctx.lab.fabric, params))
        configure_bgp(ctx.lab, node, f"neighbor {address} remote-as {record['asn']}")

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, address = session_of(ctx.lab.fabric, params)
        configure_bgp(ctx.lab, node,
                      f"neighbor {address} remote-as {far_end(ctx.lab.fabric, params).asn}")


def far_end(fabric, params):
    """The switch at the other end of the session from the misconfigured one."""
    return fabric.nodes[resolve_link(fabric, params.link)[2]]
