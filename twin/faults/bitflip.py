"""bitflip: a link corrupts rate_pct of the TCP/UDP packets it carries (an nftables payload
edit), optionally only packets of at least min_size bytes.

The damaged bits are those of the transport checksum field: nftables keeps the TCP/UDP
checksum consistent when it rewrites any other bytes (csum_flags L4), which would hand
corrupted data to the application with a valid checksum. Rewriting the checksum field
itself leaves it wrong, as a flipped bit anywhere in the segment would. Like a switch discarding a
frame on a CRC error, the receiving host's stack discards the damaged packet and counts it (Udp/Tcp
InCsumErrors in /proc/net/snmp).

For that to hold, checksum offload is switched off on every interface of the lab while the
fault is active: a veth marks received packets as checksum-verified when rx checksumming is
on, and with tx offload the checksum would be computed after the damage. Either way corrupted
data would reach the application unnoticed. Clearing restores every interface's setting.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from twin.faults.base import FaultContext, LinkParams, OnLink, nft_share
from twin.lab import nft, offload
from twin.model.targets import receiving_ends, resolve_link

DAMAGE = 0xDEAD  # written over the checksum (non-zero: a zero UDP checksum means "none")
CHECKSUM_BIT_OFFSET = {"udp": 48, "tcp": 128}  # bit offset of the checksum in each header


class BitflipParams(LinkParams):
    rate_pct: float = Field(gt=0, le=100, description="share of packets damaged, 0 < rate_pct <= 100")
    min_size: int | None = Field(None, ge=0, le=65535, description="only packets of at least this many bytes")

    @field_validator("rate_pct")
    @classmethod
    def _expressible(cls, value, info):
        return nft_share(value, info.field_name)


def damage_rule(params, proto: str) -> list[dict]:
    exprs = [{"match": {"op": "==", "left": {"meta": {"key": "protocol"}}, "right": "ip"}},
             {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "protocol"}},
                        "right": proto}}]
    if params.min_size is not None:
        exprs.append({"match": {"op": ">=", "left": {"meta": {"key": "length"}}, "right": params.min_size}})
    if params.rate_pct < 100:
        exprs.append({"match": {"op": "<", "left": {"numgen": {"mode": "random", "mod": 10000}},
                                "right": int(params.rate_pct * 100)}})
    field = {"payload": {"base": "th", "offset": CHECKSUM_BIT_OFFSET[proto], "len": 16}}
    return exprs + [{"counter": None}, {"mangle": {"key": field, "value": DAMAGE}}]


class Bitflip(OnLink):
    name = "bitflip"
    params = BitflipParams
    training_level = 2

    def check(self, fabric, params, lasts_s):
        # The rule compares the packet's length as the hook sees it: the IP packet, at most the MTU.
        if params.min_size is not None and params.min_size > fabric.mtu:
            return [("min_size", f"min_size {params.min_size} is above the lab's MTU ({fabric.mtu}): no packet "
                     "is that large, the fault would never fire", f"at most {fabric.mtu}, or omit it")]
        return []

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"link": rng.choice(links), "direction": "both", "rate_pct": rng.choice([5, 10])}

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        link, a, b = resolve_link(ctx.lab.fabric, params.link)
        record["offload"] = {}
        for node in ctx.lab.fabric.nodes:
            ifnames = [link.endpoint(node).ifname for link in ctx.lab.fabric.links_of(node)]
            path = ctx.lab.netns(node)
            record["offload"][node] = offload.get_checksum_offload(path, ifnames)
            ctx.lab.state.save()
            offload.set_checksum_offload(path, {i: {f: False for f in offload.CHECKSUM_FEATURES} for i in ifnames})
        table = record["table"] = nft.table_name(fault_id)
        record["nodes"] = []
        for end in receiving_ends(link, a, b, params.direction):
            record["nodes"].append(end.node)
            ctx.lab.state.save()
            chain, commands = nft.device_chain(table, end.ifname, "ingress")
            nft.apply(ctx.lab.runtime, end.node, commands + [nft.rule(table, chain, damage_rule(params, proto))
                                                         for proto in CHECKSUM_BIT_OFFSET])

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        for node in record.get("nodes", []):
            nft.delete_table(ctx.lab.runtime, node, "netdev", record["table"])
        for node, settings in record.get("offload", {}).items():
            offload.set_checksum_offload(ctx.lab.netns(node), settings)
