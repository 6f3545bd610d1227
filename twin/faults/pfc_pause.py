"""pfc_pause: a link direction is paused without dropping, as by PFC pause frames from its
receiver: the lab's PFC controller holds the sender's gate (pfc/), once (pause_ms) or pause_ms
every period_ms. The held queue fills and pauses its own senders in turn, like any congestion.
The report gives the pauses and the paused time."""

from __future__ import annotations

from pydantic import Field, model_validator

from twin.faults.base import FaultContext, LinkParams, OnLink
from twin.lab.pfc import client
from twin.model.ports import Port
from twin.model.targets import TargetError, resolve_link


class PfcPauseParams(LinkParams):
    pause_ms: float = Field(gt=0, le=3_600_000, description="how long each pause holds the direction, up to an hour")
    period_ms: float | None = Field(None, gt=0, le=3_600_000, description="repeat a pause every period_ms")

    @model_validator(mode="after")
    def _period_longer_than_pause(self):
        if self.period_ms is not None and self.period_ms <= self.pause_ms:
            raise ValueError("period_ms must be longer than pause_ms")
        return self


def require_lossless(fabric, kind: str) -> None:
    if not fabric.pfc:
        raise TargetError(f"lab {fabric.name} is lossy (links.pfc: false): {kind} needs PFC",
                          hint="set `pfc: true` under links in the lab file (the default)")


def sending_ends(link, a, b, direction):
    """a_to_b is paused at a's egress; both pauses both egresses."""
    nodes = {"a_to_b": [a], "b_to_a": [b], "both": [a, b]}[direction]
    return [link.endpoint(node) for node in nodes]


class PfcPause(OnLink):
    name = "pfc_pause"
    params = PfcPauseParams

    def targets(self, fabric, params):
        require_lossless(fabric, self.name)
        return super().targets(fabric, params)

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        link, a, b = resolve_link(ctx.lab.fabric, params.link)
        record["ports"] = [[e.node, e.ifname] for e in sending_ends(link, a, b, params.direction)]
        client.hold(ctx.lab.state.directory, fault_id, [Port(*p) for p in record["ports"]],
                    params.pause_ms, params.period_ms)

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        if "ports" in record:
            record["report"] = client.release(ctx.lab.state.directory, fault_id)
