"""ecn_thresholds: one switch's ECN marking pushed off or to absurd thresholds, as a QoS template
with the wrong values: its queues fill to XOFF before they mark (or never mark), so the senders'
congestion control stops pacing through it and PFC pauses again where marks used to do."""

from __future__ import annotations

from pydantic import Field, model_validator

from twin.faults.base import FaultContext, OnNode, Params
from twin.lab.pfc import client as pfc_client
from twin.model.buffers import for_port
from twin.model.ports import ports


class EcnThresholdsParams(Params):
    node: str = Field(description="the switch")
    kmin_kb: float = Field(ge=0, description="marking starts above this queue depth (KB); 0 turns marking off")
    kmax_kb: float | None = Field(None, gt=0, description="every ECN-capable packet is marked above this (KB); "
                                                          "omitted: kmin_kb")
    pmax: float | None = Field(None, gt=0, le=1, description="the marking probability at kmax; omitted: the lab's")

    @model_validator(mode="after")
    def _ordered(self):
        if self.kmax_kb is not None and self.kmax_kb < self.kmin_kb:
            raise ValueError(f"kmax_kb {self.kmax_kb} is below kmin_kb {self.kmin_kb}")
        return self


def switch_ports(fabric, node: str):
    return [port for port in ports(fabric) if port.node == node]


class EcnThresholds(OnNode):
    name = "ecn_thresholds"
    params = EcnThresholdsParams
    roles = ("leaf", "spine", "superspine")
    training_level = None  # a congestion-control setting: visible under load only, not in the pools yet

    def check(self, fabric, params, lasts_s):
        if not fabric.ecn:
            return [("node", f"lab {fabric.name} marks nothing (links.ecn is off): nothing to push",
                     "run it on a lossless lab with ECN marking (the default with pfc: true)")]
        return []

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        kmin = int(params.kmin_kb * 1000)
        kmax = int((params.kmax_kb if params.kmax_kb is not None else params.kmin_kb) * 1000)
        record["ports"] = []
        for port in switch_ports(ctx.lab.fabric, params.node):
            pmax = params.pmax if params.pmax is not None else for_port(ctx.lab.fabric, port).pmax
            pfc_client.tune(ctx.lab.paths.root, fault_id, port, kmin=kmin, kmax=kmax, pmax=pmax)
            record["ports"].append(port.ifname)

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        pfc_client.release(ctx.lab.paths.root, fault_id)
