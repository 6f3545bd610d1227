"""pfc_pause: a link direction is paused without dropping, like a PFC pause frame: the sender's
queue is held behind a closed gate (pause.py), then the gate opens and they drain. Once (pause_ms) or periodic (pause_ms every period_ms). Runs as a fault agent
and reports pause count and paused time."""

from __future__ import annotations

import time

from pydantic import Field, model_validator

from . import agent, register
from .base import FaultContext, LinkParams, OnLink, resolve_link
from .pause import Ports


class PfcPauseParams(LinkParams):
    pause_ms: float = Field(gt=0, description="how long each pause holds the direction")
    period_ms: float | None = Field(None, gt=0, description="repeat a pause every period_ms")

    @model_validator(mode="after")
    def _period_longer_than_pause(self):
        if self.period_ms is not None and self.period_ms <= self.pause_ms:
            raise ValueError("period_ms must be longer than pause_ms")
        return self


def sending_ends(link, a, b, direction):
    """a_to_b is paused at a's egress; both pauses both egresses."""
    nodes = {"a_to_b": [a], "b_to_a": [b], "both": [a, b]}[direction]
    return [link.endpoint(node) for node in nodes]


class PfcPause(OnLink):
    name = "pfc_pause"
    params = PfcPauseParams

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        link, a, b = resolve_link(ctx.fabric, params.link)
        ports = Ports(ctx)
        try:
            record["ports"] = [[e.node, e.ifname] for e in sending_ends(link, a, b, params.direction)]
            for port in record["ports"]:
                ports.add_gate(*port)
        finally:
            ports.close()
        record["agent"] = agent.start(ctx, fault_id)  # saves the state, the gated ports included

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        record["report"] = agent.stop(ctx, fault_id)
        ports = Ports(ctx)
        try:
            for port in record.get("ports", []):
                ports.remove_gate(*port)
        finally:
            ports.close()

    def run(self, ctx: FaultContext, fault_id: str, params, stopping) -> None:
        gated = next(f for f in ctx.state.faults if f["id"] == fault_id)["record"]["ports"]
        ports = Ports(ctx)
        pauses, paused_s = 0, 0.0
        try:
            while not stopping.is_set():
                started = time.monotonic()
                for port in gated:
                    ports.pause(*port)
                stopping.wait(params.pause_ms / 1000)
                for port in gated:
                    ports.resume(*port)
                pauses += 1
                paused_s += time.monotonic() - started
                agent.write_report(ctx.state, fault_id, {"pauses": pauses, "paused_s": round(paused_s, 3)})
                if params.period_ms is None:
                    stopping.wait()
                    break
                stopping.wait(max(0.0, params.period_ms / 1000 - (time.monotonic() - started)))
        finally:
            for port in gated:
                ports.resume(*port)
            ports.close()


register(PfcPause())
