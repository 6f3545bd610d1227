"""bitflip: a link corrupts rate_pct of the TCP/UDP packets it carries (a failing optic or cable),
optionally only packets of at least min_size bytes.

Done by the receiving port's physical layer (lab/ports/phy.py, the same program on every port of every
lab): a frame damaged on the wire fails the receiving port's frame check, so the port discards it
and counts it (`rx_crc_errors` of that port, in `twin lab ports`, telemetry and Prometheus),
as a switch or NIC does, and its optic's receive power is low (lab/ports/optics.py); nothing else on
any node differs from a healthy lab. Not built: the
in-chip flip of a switch ASIC that recomputes the frame check (AIPod), which reaches the hosts
and counts as their checksum errors: veth pairs never compute a checksum that offload left
partial, so showing it would need checksum offload off on every port.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from twin.faults.base import FaultContext, LinkParams, OnLink, drawable_share
from twin.lab.ports import optics, phy
from twin.model.ports import Port
from twin.model.targets import receiving_ends, resolve_link


class BitflipParams(LinkParams):
    rate_pct: float = Field(gt=0, le=100, description="share of packets damaged, 0 < rate_pct <= 100")
    min_size: int | None = Field(None, ge=0, le=65535, description="only packets of at least this many bytes")

    @field_validator("rate_pct")
    @classmethod
    def _expressible(cls, value, info):
        return drawable_share(value, info.field_name)


class Bitflip(OnLink):
    name = "bitflip"
    params = BitflipParams
    training_level = 2

    def check(self, fabric, params, lasts_s):
        # The physical layer compares the IP packet's length, at most the MTU.
        if params.min_size is not None and params.min_size > fabric.mtu:
            return [("min_size", f"min_size {params.min_size} is above the lab's MTU ({fabric.mtu}): no packet "
                     "is that large, the fault would never fire", f"at most {fabric.mtu}, or omit it")]
        return []

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"link": rng.choice(links), "direction": "both", "rate_pct": rng.choice([5, 10])}

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        link, a, b = resolve_link(ctx.lab.fabric, params.link)
        fields = {"corrupt": phy.ppm(params.rate_pct), "corrupt_min": params.min_size or 0,
                  "attenuation": optics.centi_db(params.rate_pct)}
        record["ports"], record["counter"] = [], "crc_errors"  # what the ports count of it (telemetry's fault counters)
        for end in receiving_ends(link, a, b, params.direction):
            record["ports"].append({"node": end.node, "ifname": end.ifname, "prior": dict.fromkeys(fields, 0)})
            ctx.lab.state.save()  # recorded before it is changed: a crash between the two clears it
            record["ports"][-1]["prior"] = phy.change(ctx.lab, Port(end.node, end.ifname), **fields)
            ctx.lab.state.save()

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        for entry in record["ports"]:
            phy.change(ctx.lab, Port(entry["node"], entry["ifname"]), **entry["prior"])
