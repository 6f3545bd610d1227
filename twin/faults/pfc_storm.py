"""pfc_storm: a broken host NIC keeps its leaf port paused until the fault ends.

propagate: true — a controller (the fault agent) reads the backlog of every paused port every
20 ms; above xoff_kb it pauses the ports that feed that switch (the neighbours' egress toward
it), below xon_kb it releases them, so the storm spreads hop by hop as in a lossless fabric.
watchdog_ms — a PFC watchdog: once the storming port has been paused that long, it stops
honouring pauses and drops what is sent toward the broken NIC (an nftables egress drop), so
the backlog drains and the fabric recovers.
"""

from __future__ import annotations

import time

from pydantic import Field, model_validator

from .. import nft
from . import agent, register
from .base import FaultContext, Params, TargetError, resolve_node
from .pause import Ports

TICK_S = 0.02


class PfcStormParams(Params):
    node: str = Field(description="the host whose NIC storms")
    nic: str = Field(description="the storming NIC, e.g. nic1")
    propagate: bool = Field(False, description="pause the ports feeding a congested paused queue (XOFF/XON)")
    xoff_kb: float = Field(64, gt=0, description="backlog that pauses the feeding ports")
    xon_kb: float = Field(16, ge=0, description="backlog below which they resume")
    watchdog_ms: float | None = Field(None, gt=0, description="drop instead of pause after this long")

    @model_validator(mode="after")
    def _xon_below_xoff(self):
        if self.xon_kb >= self.xoff_kb:
            raise ValueError("xon_kb must be below xoff_kb")
        return self


def storm_port(fabric, params) -> tuple[str, str]:
    """The leaf's egress port toward the storming NIC."""
    host = resolve_node(fabric, params.node, roles=("host",))
    for link in fabric.links_of(host):
        if link.endpoint(host).ifname == params.nic:
            return link.a.node, link.a.ifname
    raise TargetError(f"{host} has no NIC '{params.nic}'",
                      hint="NICs: " + ", ".join(l.endpoint(host).ifname for l in fabric.links_of(host)))


TIER = {"host": 0, "leaf": 1, "spine": 2, "superspine": 3}


def feeders(fabric, node: str, ifname: str) -> list[tuple[str, str]]:
    """Egress ports of the neighbours whose traffic can leave `node` through `ifname`.

    Routing in the Clos is valley-free: a packet that came down into a switch never goes up
    again. So a port going up is fed only from below, a port going down from every other
    neighbour. (Pausing every ingress instead builds cyclic pause dependencies, a PFC
    deadlock that outlives the storm.)"""
    out = next(l for l in fabric.links_of(node) if l.endpoint(node).ifname == ifname).peer(node).node
    level = TIER[fabric.nodes[node].role]
    going_up = TIER[fabric.nodes[out].role] > level
    result = []
    for link in fabric.links_of(node):
        peer = link.peer(node)
        if peer.node == out or (going_up and TIER[fabric.nodes[peer.node].role] > level):
            continue
        result.append((peer.node, peer.ifname))
    return result


class PfcStorm:
    name = "pfc_storm"
    params = PfcStormParams

    def targets(self, fabric, params):
        return [resolve_node(fabric, params.node, roles=("host",))]

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        record["storm_port"] = list(storm_port(ctx.fabric, params))
        record["agent"] = agent.start(ctx, fault_id)

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        report = record["report"] = agent.stop(ctx, fault_id)
        # The agent restores what it paused; this repeats it in case the agent died.
        ports = Ports(ctx)
        try:
            for node, ifname in report.get("touched", []):
                if ports.has_gate(node, ifname):
                    ports.remove_gate(node, ifname)
        finally:
            ports.close()
        nft.delete_table(ctx.runtime, record["storm_port"][0], "netdev", nft.table_name(fault_id))

    def run(self, ctx: FaultContext, fault_id: str, params, stopping) -> None:
        Storm(ctx, fault_id, params).run(stopping)


class Storm:
    def __init__(self, ctx: FaultContext, fault_id: str, params):
        self.ctx, self.fault_id, self.params = ctx, fault_id, params
        self.ports = Ports(ctx)
        self.touched: list[tuple[str, str]] = []  # ports with a gate
        self.reasons: dict[tuple[str, str], set] = {}  # paused port -> why (storm, or a congested port)
        self.asserted: set[tuple[str, str]] = set()  # congested ports whose feeders we paused
        self.timeline: list[list] = []
        self.start = time.monotonic()
        self.watchdog_at: float | None = None
        self.max_paused = 0

    def _touch(self, port) -> None:
        if port not in self.touched:
            self.touched.append(port)
            self.ports.add_gate(*port)
            self._save()

    def _pause(self, port, reason) -> None:
        self._touch(port)
        if not self.reasons.get(port):
            self.ports.pause(*port)
            self.timeline.append([round(time.monotonic() - self.start, 3), "pause", *port])
        self.reasons.setdefault(port, set()).add(reason)

    def _resume(self, port, reason) -> None:
        reasons = self.reasons.get(port, set())
        reasons.discard(reason)
        if not reasons and port in self.touched:
            self.ports.resume(*port)
            self.timeline.append([round(time.monotonic() - self.start, 3), "resume", *port])

    def _save(self) -> None:
        paused = sorted(p for p, r in self.reasons.items() if r)
        agent.write_report(self.ctx.state, self.fault_id, {
            "touched": [list(p) for p in self.touched],
            "paused_ports": [" ".join(p) for p in paused], "max_paused": self.max_paused,
            "watchdog_fired_s": self.watchdog_at, "timeline": self.timeline[-200:]})

    def run(self, stopping) -> None:
        storm = tuple(storm_port(self.ctx.fabric, self.params))
        try:
            self._pause(storm, "storm")
            while not stopping.wait(TICK_S):
                self._tick(storm)
                self.max_paused = max(self.max_paused, sum(1 for r in self.reasons.values() if r))
                self._save()
        finally:
            for port in self.touched:
                self.ports.remove_gate(*port)
            self.reasons.clear()
            self._save()
            self.ports.close()

    def _tick(self, storm) -> None:
        params = self.params
        if params.watchdog_ms and self.watchdog_at is None and \
                time.monotonic() - self.start >= params.watchdog_ms / 1000:
            self._drop_mode(storm)
        if not params.propagate:
            return
        for port in [p for p, r in self.reasons.items() if r] + list(self.asserted):
            backlog_kb = self.ports.backlog_bytes(*port) / 1000
            if backlog_kb > params.xoff_kb and port not in self.asserted:
                self.asserted.add(port)
                for feeder in feeders(self.ctx.fabric, *port):
                    self._pause(feeder, port)
            elif backlog_kb < params.xon_kb and port in self.asserted:
                self.asserted.discard(port)
                for feeder in feeders(self.ctx.fabric, *port):
                    self._resume(feeder, port)

    def _drop_mode(self, storm) -> None:
        """The watchdog: stop pausing the stuck port and drop what is sent toward the broken NIC."""
        node, ifname = storm
        table = nft.table_name(self.fault_id)
        chain, commands = nft.device_chain(table, ifname, "egress")
        nft.apply(self.ctx.runtime, node, commands + [nft.rule(table, chain, [{"counter": None}, {"drop": None}])])
        self._resume(storm, "storm")
        self.watchdog_at = round(time.monotonic() - self.start, 3)
        self.timeline.append([self.watchdog_at, "watchdog-drop", *storm])


register(PfcStorm())
