"""lossy_class: one switch port left out of the lossless class, as a QoS push that missed a port
(or a template that maps the job's priority to a lossy queue there): its queue toward the link no
longer pauses its senders when it fills. Nothing changes at rest; under congestion that queue
fills to its buffer and drops, while every other queue still pauses, so a RoCE job loses packets
at one port and slows down by its retransmissions (NCCL issue #2383: retry count exceeded)."""

from __future__ import annotations

from pydantic import Field

from twin.faults.base import FaultContext, OnLink, Params
from twin.lab.pfc import client as pfc_client
from twin.model.ports import Port
from twin.model.targets import TargetError, resolve_link


class LossyClassParams(Params):
    link: str = Field(description='the link, e.g. "leaf-g1-r1 -- spine-r1-s1"')
    node: str = Field(description="the switch whose port into the link leaves the lossless class (one of the "
                                  "link's two ends)")


def lossy_port(fabric, params) -> Port:
    """The switch port (the link's end on `node`) whose queue stops pausing its senders."""
    link, a, b = resolve_link(fabric, params.link)
    if params.node not in (a, b):
        raise TargetError(f"{params.node} is not an end of {params.link}", hint=f"name {a} or {b}", key="node")
    if not fabric.nodes[params.node].is_switch:
        switch = b if params.node == a else a
        raise TargetError(f"{params.node} is a host: its NIC has no switch queue", hint=f"name {switch}", key="node")
    return Port(params.node, link.endpoint(params.node).ifname)


class LossyClass(OnLink):
    name = "lossy_class"
    params = LossyClassParams
    training_level = None  # visible under congestion only, like ecn_thresholds: not in the pools yet

    def targets(self, fabric, params):
        lossy_port(fabric, params)  # checked when the scenario loads
        return super().targets(fabric, params)

    def check(self, fabric, params, lasts_s):
        if not fabric.pfc:
            return [("link", f"lab {fabric.name} is lossy (links.pfc is off): there is no lossless class to leave",
                     "run it on a lossless lab (pfc: true, the default)")]
        return []

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        port = lossy_port(ctx.lab.fabric, params)
        record.update(node=port.node, ifname=port.ifname)
        # XOFF 0: the queue never pauses its senders again (pfc/queues.py); XON stays, so a pause it
        # asserted before ends as usual once it drains.
        pfc_client.tune(ctx.lab.paths.root, fault_id, port, xoff=0)

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        pfc_client.release(ctx.lab.paths.root, fault_id)
