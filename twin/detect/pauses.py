"""Pause evidence for the probe-localizer: name the source of a PFC storm (or of pause frames) from
the ports' pause counters, as a switch's PFC watchdog and an operator's pause-counter dashboards do,
instead of from the probes a storm delays.

A port held for STORM_S or longer without a break is stuck. Whoever holds it is the suspect:
- a host NIC holds its leaf's port: a host forwards nothing, so its pauses are its own (a broken
  NIC's storm, or a receiver that cannot keep up): the host is named (kind pfc_storm);
- a switch holds a neighbour's port while none of its queues is above XOFF: nothing it forwards
  explains the pause, so the link direction is named (kind pfc_pause).
A switch holding a port while one of its queues is above XOFF is passing the pause on (a storm
spreading, or congestion): not named, the pause has a cause further down.
"""

from __future__ import annotations

from twin.detect.verdicts import Verdict
from twin.model.fabric import Fabric
from twin.model.ports import Port, peer

DETECTOR = "probe-localizer"
STORM_S = 1.0
FORGET_S = 3.0


class PauseLocalizer:
    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        self._named: dict[str, float] = {}  # name -> last time it was suspect

    def observe(self, t: float, ports: dict) -> list[Verdict]:
        """ports: (node, ifname) -> PortCounters (pfc/counters.py); returns new verdicts."""
        suspects: dict[str, tuple[str, str | None, str | None]] = {}
        for key, counter in ports.items():
            if counter.paused_for_s < STORM_S:
                continue
            port = Port(*key)
            holder = peer(self.fabric, port).node
            if not self.fabric.nodes[holder].is_switch:
                suspects[holder] = ("pfc_storm", None, holder)
            elif not any(c.xoff for (node, _i), c in ports.items() if node == holder):
                link = f"{port.node} -- {holder}"
                suspects[link] = ("pfc_pause", link, None)
        verdicts = [Verdict(t=t, detector=DETECTOR, kind=kind, link=link, node=node, confidence=0.9)
                    for name, (kind, link, node) in sorted(suspects.items()) if name not in self._named]
        for name in suspects:
            self._named[name] = t
        self._named = {name: seen for name, seen in self._named.items() if t - seen < FORGET_S}
        return verdicts
