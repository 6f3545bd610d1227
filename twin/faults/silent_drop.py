"""silent_drop: the link stays up and drops loss_pct of IP packets in the chosen direction(s).

Done by the receiving port's physical layer (lab/ports/phy.py, the same program on every port of every
lab): nothing a node lists tells the port from a healthy one, and nothing counts the loss. Option
source: `optic`, a dying optic, whose receive power falls below its warning threshold
(lab/ports/optics.py, `twin lab ports`); `asic`, a chip's defect that no port reading shows. Option
flows_pct: only the flows whose 5-tuple hash (seeded by the scenario seed) falls in that share
are hit, as a broken ECMP member or a chip defect does (source `asic` unless told otherwise). Which packets
of a hit flow are dropped is drawn by the kernel's unseeded random numbers, so not reproducible;
which flows are hit is.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from twin.faults.base import FaultContext, LinkParams, OnLink, drawable_share
from twin.lab.ports import optics, phy
from twin.model.ports import Port
from twin.model.targets import receiving_ends, resolve_link


class SilentDropParams(LinkParams):
    loss_pct: float = Field(gt=0, le=100, description="share of packets dropped, 0 < loss_pct <= 100")
    flows_pct: float | None = Field(None, gt=0, le=100,
                                    description="only this share of flows (5-tuple hash) is hit")
    source: Literal["optic", "asic"] | None = Field(
        None, description="optic: a dying optic, its port's receive power falls (twin lab ports); asic: a "
                          "switch chip's defect, nothing on any port shows it; default optic, asic with flows_pct")

    @field_validator("loss_pct", "flows_pct")
    @classmethod
    def _expressible(cls, value, info):
        return drawable_share(value, info.field_name)


def source(params: SilentDropParams) -> str:
    """A drop of some flows only is a chip's (a broken ECMP member, a corrupted table), not an optic's."""
    return params.source or ("asic" if params.flows_pct is not None else "optic")


class SilentDrop(OnLink):
    name = "silent_drop"
    params = SilentDropParams
    training_level = 2

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"link": rng.choice(links), "direction": "both", "loss_pct": rng.choice([5, 10, 20])}

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        link, a, b = resolve_link(ctx.lab.fabric, params.link)
        fields = {"drop": phy.ppm(params.loss_pct), "flow_seed": ctx.seed & 0xFFFFFFFF,
                  "drop_flows": phy.ppm(params.flows_pct) if params.flows_pct is not None else phy.ONE,
                  "attenuation": optics.centi_db(params.loss_pct) if source(params) == "optic" else 0}
        record["ports"], record["counter"] = [], "dropped"  # what the ports count of it (telemetry's fault counters)
        for end in receiving_ends(link, a, b, params.direction):
            record["ports"].append({"node": end.node, "ifname": end.ifname, "prior": dict.fromkeys(fields, 0)})
            ctx.lab.state.save()  # recorded before it is changed: a crash between the two clears it
            record["ports"][-1]["prior"] = phy.change(ctx.lab, Port(end.node, end.ifname), **fields)
            ctx.lab.state.save()

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        for entry in record["ports"]:
            phy.change(ctx.lab, Port(entry["node"], entry["ifname"]), **entry["prior"])
