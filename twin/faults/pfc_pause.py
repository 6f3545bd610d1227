"""pfc_pause: a link direction is paused without dropping, like a PFC pause frame: the sender's
HTB class drops to a trickle while a deep FIFO holds the packets, then the rate is restored
and they drain. Once (pause_ms) or periodic (pause_ms every period_ms). Runs as a fault agent
and reports pause count and paused time."""

from __future__ import annotations

import time

from pydantic import Field, model_validator
from pyroute2 import IPRoute

from .. import shaping
from . import agent, register
from .base import FaultContext, LinkParams, OnLink, resolve_link

PAUSE_RATE_BPS = 8_000  # HTB needs a positive rate; 1 kB/s holds a 200 Mbit/s link to nothing
HOLD_QUEUE = 0x200000  # 20: the deep FIFO under class 1:10 while the fault is active
HOLD_PACKETS = 100_000
DRAIN_TIMEOUT_S = 10.0


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
        prior = record["prior"] = []
        for end in sending_ends(link, a, b, params.direction):
            with IPRoute(netns=ctx.runtime.netns_path(end.node), flags=0) as ipr:
                index = ipr.link_lookup(ifname=end.ifname)[0]
                prior.append({"node": end.node, "ifname": end.ifname,
                              "rate_bps": shaping.shaped_rate_bps(ipr, index)})
                ipr.tc("add", "pfifo", index, handle=HOLD_QUEUE, parent=shaping.CLASS_HANDLE, limit=HOLD_PACKETS)
        record["agent"] = agent.start(ctx, fault_id)  # saves the state, prior rates included

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        record["report"] = agent.stop(ctx, fault_id)
        for item in record["prior"]:
            with IPRoute(netns=ctx.runtime.netns_path(item["node"]), flags=0) as ipr:
                index = ipr.link_lookup(ifname=item["ifname"])[0]
                shaping.set_class_rate(ipr, index, item["rate_bps"])
                _drain(ipr, index)
                ipr.tc("del", "pfifo", index, handle=HOLD_QUEUE, parent=shaping.CLASS_HANDLE)

    def run(self, ctx: FaultContext, fault_id: str, params, stopping) -> None:
        record = next(f for f in ctx.state.faults if f["id"] == fault_id)["record"]
        pauses, paused_s = 0, 0.0
        try:
            while not stopping.is_set():
                started = time.monotonic()
                _set_rates(ctx, record["prior"], PAUSE_RATE_BPS)
                stopping.wait(params.pause_ms / 1000)
                _set_rates(ctx, record["prior"], None)
                pauses += 1
                paused_s += time.monotonic() - started
                agent.write_report(ctx.state, fault_id, {"pauses": pauses, "paused_s": round(paused_s, 3)})
                if params.period_ms is None:
                    stopping.wait()
                    break
                stopping.wait(max(0.0, params.period_ms / 1000 - (time.monotonic() - started)))
        finally:
            _set_rates(ctx, record["prior"], None)


def _set_rates(ctx, prior, rate_bps):
    for item in prior:
        with IPRoute(netns=ctx.runtime.netns_path(item["node"]), flags=0) as ipr:
            index = ipr.link_lookup(ifname=item["ifname"])[0]
            shaping.set_class_rate(ipr, index, rate_bps or item["rate_bps"])


def _drain(ipr, index) -> None:
    """Wait for the held packets to leave before the deep FIFO is removed (removing drops them)."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline:
        backlog = sum(q.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["qlen"]
                      for q in ipr.get_qdiscs(index=index) if q["handle"] == HOLD_QUEUE)
        if backlog == 0:
            return
        time.sleep(0.01)


register(PfcPause())
