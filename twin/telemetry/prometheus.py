"""The latest counters in Prometheus' text format (prometheus_client), served on localhost; with a
RoutingState, every switch's BGP sessions, BFD peers and ECMP widths too, and the active faults."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from twin.model.fabric import Fabric
from twin.telemetry.routing_state import RoutingState
from twin.telemetry.sampler import Sampler

COUNTERS = {"rx_bytes": "Bytes received", "tx_bytes": "Bytes sent", "rx_packets": "Packets received",
            "tx_packets": "Packets sent", "rx_dropped": "Packets dropped on receive",
            "tx_dropped": "Packets dropped on send", "rx_errors": "Receive errors", "tx_errors": "Send errors",
            "rx_crc_errors": "Frames that failed the port's frame check (damaged on the wire), discarded",
            "qdisc_drops": "Packets the root qdisc dropped",
            "pfc_rx_pause": "PFC pauses this port received (its egress was held)",
            "pfc_tx_pause": "PFC XOFF this interface sent (it held its peer's egress)",
            "ecn_marked": "Packets the port's egress queue marked ECN Congestion Experienced",
            "steered_in": "Packets adaptive routing moved onto this uplink from the one the kernel chose"}
GAUGES = {"backlog_bytes": ("fabric_twin_qdisc_backlog_bytes", "Bytes queued in the root qdisc"),
          "pfc_queue_bytes": ("fabric_twin_pfc_queue_bytes", "Bytes in the port's PFC-managed egress queue"),
          "oper_up": ("fabric_twin_interface_oper_up", "1 if the interface's operational state is up (carrier)")}

OPTICS = {"tx_dbm": ("fabric_twin_optic_tx_power_dbm", "Transmit power of the port's optic"),
          "rx_dbm": ("fabric_twin_optic_rx_power_dbm", "Receive power of the port's optic (low: a dying optic, a "
                                                       "dirty connector)"),
          "temperature_c": ("fabric_twin_optic_temperature_celsius", "Temperature of the port's optic")}


ROUTING_WAIT_S = 3.0  # a scrape waits this long for the first routing read (Prometheus allows 10 s)


class LabCollector:
    def __init__(self, sampler: Sampler, fabric: Fabric, routing: RoutingState | None = None):
        self.sampler, self.fabric, self.routing = sampler, fabric, routing
        self.link_of = {(end.node, end.ifname): link.name for link in fabric.links for end in (link.a, link.b)}

    def collect(self):
        snap = self.sampler.latest
        if snap is None:
            return
        labels = ["lab", "node", "interface", "link"]
        families = {name: CounterMetricFamily(f"fabric_twin_interface_{name}", help_text, labels=labels)
                    for name, help_text in COUNTERS.items()}
        gauges = {name: GaugeMetricFamily(metric, help_text, labels=labels)
                  for name, (metric, help_text) in GAUGES.items()}
        paused = CounterMetricFamily("fabric_twin_pfc_paused_seconds", "Seconds this port's egress was held by PFC",
                                     labels=labels)
        for (node, ifname), values in sorted(snap.interfaces.items()):
            key = [self.fabric.name, node, ifname, self.link_of.get((node, ifname), "")]
            for name, family in families.items():
                family.add_metric(key, values.get(name, 0))
            for name, family in gauges.items():
                family.add_metric(key, values.get(name, 0))
            paused.add_metric(key, values.get("pfc_paused_ms", 0) / 1000)
        yield from families.values()
        yield from gauges.values()
        yield paused
        yield from self._optics(labels)
        checksum = CounterMetricFamily("fabric_twin_checksum_errors", "Checksum and header errors (/proc/net/snmp)",
                                       labels=["lab", "host", "counter"])
        for (host, counter), value in sorted(snap.checksum_errors.items()):
            checksum.add_metric([self.fabric.name, host, counter], value)
        yield checksum
        faults = CounterMetricFamily("fabric_twin_fault_packets",
                                     "Packets an active fault dropped or damaged, as the ports' physical layer counts",
                                     labels=["lab", "fault", "node"])
        for fault, per_node in sorted(self.sampler.fault_counters.items()):
            for node, packets in sorted(per_node.items()):
                faults.add_metric([self.fabric.name, fault, node], packets)
        yield faults
        yield from self._active_faults()
        if self.routing is not None:
            yield from self._routing(self.routing.want(ROUTING_WAIT_S))

    def _active_faults(self):
        active = GaugeMetricFamily("fabric_twin_fault_active", "1 for every fault active on the lab now (none shown "
                                   "while a training session hides them)", labels=["lab", "fault", "kind", "where"])
        for fault in self.sampler.lab.visible_faults() or []:
            params = fault.get("params", {})
            where = params.get("link") or params.get("node") or ""
            active.add_metric([self.fabric.name, fault["id"], fault.get("kind", ""), where], 1)
        yield active

    def _routing(self, statuses):
        bgp = GaugeMetricFamily("fabric_twin_bgp_session_established", "1 if the BGP session is Established",
                                labels=["lab", "node", "peer", "state"])
        bfd = GaugeMetricFamily("fabric_twin_bfd_peer_up", "1 if the BFD peer is up", labels=["lab", "node", "peer"])
        widths = GaugeMetricFamily("fabric_twin_host_routes", "Host prefixes the switch has installed with this many "
                                   "next hops (0: missing)", labels=["lab", "node", "ecmp_width"])
        for name, status in sorted(statuses.items()):
            for address, state in sorted(status.bgp_addresses.items()):
                bgp.add_metric([self.fabric.name, name, address, state], 1 if state == "Established" else 0)
            for address, state in sorted(status.bfd.items()):
                bfd.add_metric([self.fabric.name, name, address], 1 if state == "up" else 0)
            for width, routes in sorted(status.ecmp_widths.items()):
                widths.add_metric([self.fabric.name, name, str(width)], routes)
        yield from (bgp, bfd, widths)

    def _optics(self, labels: list[str]):
        families = {name: GaugeMetricFamily(metric, help_text, labels=labels)
                    for name, (metric, help_text) in OPTICS.items()}
        for port, reading in sorted(self.sampler.optics.items()):
            key = [self.fabric.name, port.node, port.ifname, self.link_of.get((port.node, port.ifname), "")]
            for name, family in families.items():
                family.add_metric(key, getattr(reading, name))
        yield from families.values()


def registry_for(sampler: Sampler, fabric: Fabric, routing: RoutingState | None = None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LabCollector(sampler, fabric, routing))
    return registry
