"""pfc_storm: a broken host NIC sends pause frames for good, holding its leaf's port toward it.

The lab's PFC controller (pfc/) holds that port; traffic for the NIC fills the port's queue past
XOFF and the leaf pauses the ports feeding it, whose queues fill in turn: the storm spreads hop by
hop through the same backpressure as any congestion, and stalls flows that merely share a paused
port. Keys:
- propagate (true): false keeps the stuck queue from pausing its senders (it fills to its buffer
  and drops, as on a port whose PFC is off), so the storm stays on one port;
- xoff_kb / xon_kb: thresholds of the stuck queue while the fault lasts (default: the lab's);
- watchdog_ms: the PFC watchdog of the stuck port: paused that long, it stops honouring pauses
  and drops what is sent toward the broken NIC, so the fabric drains and recovers (default: the
  lab's `pfc_watchdog_ms`, off unless set).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from twin.faults.base import FaultContext, OnNode, Params
from twin.faults.pfc_pause import require_lossless
from twin.lab.pfc import client
from twin.model.ports import Port
from twin.model.targets import TargetError, resolve_node


class PfcStormParams(Params):
    node: str = Field(description="the host whose NIC storms")
    nic: str = Field(description="the storming NIC, e.g. nic1")
    propagate: bool = Field(True, description="the stuck queue pauses its senders, so the storm spreads "
                                              "(false: it drops when full)")
    xoff_kb: float | None = Field(None, gt=0, le=1_000_000, description="XOFF of the stuck queue (default: the lab's)")
    xon_kb: float | None = Field(None, ge=0, le=1_000_000, description="XON of the stuck queue (default: the lab's)")
    watchdog_ms: float | None = Field(None, gt=0, le=60_000, description="drop instead of pause after this long")

    @model_validator(mode="after")
    def _xon_below_xoff(self):
        if self.xoff_kb is not None and self.xon_kb is not None and self.xon_kb >= self.xoff_kb:
            raise ValueError("xon_kb must be below xoff_kb")
        return self


def storm_port(fabric, params) -> Port:
    """The leaf's egress port toward the storming NIC."""
    host = resolve_node(fabric, params.node, roles=("host",))
    for link in fabric.links_of(host):
        if link.endpoint(host).ifname == params.nic:
            return Port(link.a.node, link.a.ifname)
    raise TargetError(f"{host} has no NIC '{params.nic}'",
                      hint="NICs: " + ", ".join(link.endpoint(host).ifname for link in fabric.links_of(host)),
                      key="nic")


class PfcStorm(OnNode):
    name = "pfc_storm"
    params = PfcStormParams
    training_level = 3
    roles = ("host",)

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        host, nic = rng.choice(sorted((n, e.ifname) for n, e in fabric.host_nics()))
        return {"node": host, "nic": nic, "propagate": True, "xoff_kb": 4, "xon_kb": 1, "watchdog_ms": 2000}

    def targets(self, fabric, params):
        require_lossless(fabric, self.name)
        storm_port(fabric, params)  # the NIC must exist
        return super().targets(fabric, params)

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        port = storm_port(ctx.lab.fabric, params)
        record["storm_port"] = list(port)
        lab_dir = ctx.lab.state.directory
        if not params.propagate:
            client.tune(lab_dir, fault_id, port, xoff=0, xon=0)
        elif params.xoff_kb is not None or params.xon_kb is not None:
            thresholds = {}
            if params.xoff_kb is not None:
                thresholds["xoff"] = int(params.xoff_kb * 1000)
            if params.xon_kb is not None:
                thresholds["xon"] = int(params.xon_kb * 1000)
            client.tune(lab_dir, fault_id, port, **thresholds)
        if params.watchdog_ms:
            client.tune(lab_dir, fault_id, port, watchdog_ms=params.watchdog_ms)
        client.hold(lab_dir, fault_id, [port])

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        if "storm_port" in record:
            record["report"] = client.release(ctx.lab.state.directory, fault_id)
