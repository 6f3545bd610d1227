"""config-audit: the lab's intent (the model, as the lab rendered and set it) against each node's
running state, swept again and again: BGP neighbours (their AS, shut or not), the multipath width,
route maps on the sessions, the ECMP hash policy, the MTU of every link's ports, and on a lossless
lab every switch queue's class (whether it still pauses its senders) and, where it marks, its ECN
thresholds (both asked of the PFC controller), and on a lab that runs LLDP who is cabled to whom
(each switch port's neighbour, asked of the switch's lldpd). A difference
is named at once, as the link or switch it is on with the fault kind it looks like; a lab that
matches its intent gets no verdict. It reads bgpd's vty socket, /proc/sys and one ioctl per port
inside each namespace: no traffic, no netlink dump.

Configuration and cabling errors are nine in ten of the incidents of the fabrics we twin (issue
31); production finds them by diffing the running state against the intended one, as this does.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from twin.detect.verdicts import Verdict
from twin.errors import RuntimeBackendError, TwinError
from twin.lab.kernel.nsutil import interface_mtus, read_sysctl
from twin.lab.pfc import client as pfc_client
from twin.lab.routing import lldp
from twin.lab.routing.frr import bgpd_running_config
from twin.model.buffers import for_port
from twin.model.fabric import Fabric, link_key
from twin.model.ports import ports
from twin.model.render import bgp_neighbors, multipath_width
from twin.model.sysctls import HASH_POLICY_SYSCTL, node_sysctls

DETECTOR = "config-audit"
FRR_DEFAULT_MAXIMUM_PATHS = 64  # FRR's `maximum-paths` when the running config has no line
MIN_SWEEP_S = 1.0  # at most one sweep a second; a slow one (a big lab) waits ten times its cost

NEIGHBOR_AS = re.compile(r"^ neighbor (\S+) remote-as (\d+)$")
NEIGHBOR_SHUT = re.compile(r"^ neighbor (\S+) shutdown$")
ROUTE_MAP = re.compile(r"^\s+neighbor (\S+) route-map (\S+) (in|out)$")
MAXIMUM_PATHS = re.compile(r"^\s+maximum-paths (\d+)$")


@dataclass(frozen=True)
class Finding:
    kind: str  # the fault kind it looks like
    link: str | None = None
    node: str | None = None
    detail: str = ""


def bgp_findings(fabric: Fabric, node: str, config: list[str]) -> list[Finding]:
    """bgpd's running config of `node` against the sessions and width the model gives it."""
    neighbors = {n["address"]: n for n in bgp_neighbors(fabric, fabric.nodes[node])}
    findings = []
    for line in config:
        if match := NEIGHBOR_AS.match(line):
            address, asn = match.group(1), int(match.group(2))
            peer = neighbors.get(address)
            if peer is not None and asn != peer["asn"]:
                findings.append(Finding("peer_mismatch", link=link_key(f"{node} -- {peer['name']}"),
                                        detail=f"{node}: neighbor {address} remote-as {asn}, "
                                               f"{peer['name']} is {peer['asn']}"))
        elif match := NEIGHBOR_SHUT.match(line):
            peer = neighbors.get(match.group(1))
            if peer is not None:
                findings.append(Finding("bgp_down", link=link_key(f"{node} -- {peer['name']}"),
                                        detail=f"{node}: neighbor {match.group(1)} shutdown"))
        elif match := ROUTE_MAP.match(line):
            findings.append(Finding("route_filter", node=node,
                                    detail=f"{node}: neighbor {match.group(1)} route-map {match.group(2)} "
                                           f"{match.group(3)} (the lab sets none on its sessions)"))
    widths = [int(m.group(1)) for m in map(MAXIMUM_PATHS.match, config) if m]
    width = widths[0] if widths else FRR_DEFAULT_MAXIMUM_PATHS
    intended = multipath_width(fabric, fabric.nodes[node])
    if width != intended and (widths or intended < FRR_DEFAULT_MAXIMUM_PATHS):
        findings.append(Finding("ecmp_width", node=node, detail=f"{node}: maximum-paths {width}, intended {intended}"))
    return findings


def kernel_findings(fabric: Fabric, node: str, netns: str) -> list[Finding]:
    """The node's hash policy and port MTUs against the lab's."""
    findings = []
    if fabric.nodes[node].is_switch:
        intended = node_sysctls(fabric, fabric.nodes[node])[HASH_POLICY_SYSCTL]
        running = read_sysctl(netns, HASH_POLICY_SYSCTL)
        if running != intended:
            findings.append(Finding("hash_policy", node=node,
                                    detail=f"{node}: {HASH_POLICY_SYSCTL} = {running}, intended {intended}"))
    mtus = interface_mtus(netns)
    for link in fabric.links_of(node):
        ifname = link.endpoint(node).ifname
        if ifname in mtus and mtus[ifname] != fabric.mtu:
            findings.append(Finding("mtu_mismatch", link=link_key(link.name),
                                    detail=f"{node} {ifname}: mtu {mtus[ifname]}, the lab's is {fabric.mtu}"))
    return findings


def marking_findings(fabric: Fabric, marking: dict[tuple[str, str], tuple[int, int, float]]) -> list[Finding]:
    """Each switch queue's ECN marking (the PFC controller's answer) against the lab's."""
    findings = []
    for port in ports(fabric):
        running = marking.get((port.node, port.ifname))
        intended = for_port(fabric, port)
        if running is None:
            continue
        if running[:2] != (intended.kmin, intended.kmax) or abs(running[2] - intended.pmax) > 1e-3:
            findings.append(Finding("ecn_thresholds", node=port.node,
                                    detail=f"{port.node} {port.ifname}: marking {running}, intended "
                                           f"{(intended.kmin, intended.kmax, intended.pmax)}"))
    return findings


def pfc_findings(fabric: Fabric, thresholds: dict[tuple[str, str], tuple[int, int]]) -> list[Finding]:
    """Each switch queue of a lossless lab that no longer pauses its senders (XOFF 0, the PFC
    controller's answer): its port left the lossless class. Other XOFF values are tuning (a storm
    drill's), not a class."""
    findings = []
    for link in fabric.links:
        for end in (link.a, link.b):
            running = thresholds.get((end.node, end.ifname))
            if running is not None and running[0] == 0:
                findings.append(Finding("lossy_class", link=link_key(link.name),
                                        detail=f"{end.node} {end.ifname}: XOFF 0, the queue never pauses its "
                                               f"senders; the lab is lossless"))
    return findings


def cabling_findings(fabric: Fabric, heard: dict[str, dict[str, lldp.Neighbor]]) -> list[Finding]:
    """Each switch port's LLDP neighbour (`heard`: switch -> port -> neighbour) against the lab's
    wiring. A port that hears another node's port than the one the lab cables to it is a miswire,
    named as the node whose ports are heard in the most wrong places (a host whose NIC cables were
    swapped is heard at two leaf ports, each the other's); a port that hears nothing is not a
    finding (its neighbour's first frame is still to come, or the link is down: routing shows that).
    """
    wrong: dict[str, list[str]] = {}
    for link in fabric.links:
        for end, far in ((link.a, link.b), (link.b, link.a)):
            neighbor = heard.get(end.node, {}).get(end.ifname)
            if neighbor is None or (neighbor.node, neighbor.port) == (far.node, far.ifname):
                continue
            wrong.setdefault(neighbor.node, []).append(
                f"{end.node} {end.ifname} hears {neighbor.node} {neighbor.port}, cabled to {far.node} {far.ifname}")
    # Swapped cables make their far ends hear wrong neighbours too (a leaf's two uplinks swapped:
    # the leaf is heard at two spine ports, each spine at one leaf port); the node heard in the
    # most wrong places is the one whose cables moved.
    most = max((len(details) for details in wrong.values()), default=0)
    return [Finding("miswire", node=node, detail="; ".join(sorted(details)))
            for node, details in sorted(wrong.items()) if node in fabric.nodes and len(details) == most]


def sweep(lab) -> list[Finding]:
    """Every node once. A node that does not answer (a switch whose FRR is down: another fault's)
    is skipped: its state cannot be compared, and routing will show the rest."""
    findings = []
    heard = {}
    for name, node in sorted(lab.fabric.nodes.items()):
        try:
            if node.is_switch:
                findings += bgp_findings(lab.fabric, name, bgpd_running_config(lab, node))
                if lab.fabric.lldp:
                    heard[name] = lldp.neighbors(lab, name)
            findings += kernel_findings(lab.fabric, name, lab.netns(name))
        except (RuntimeBackendError, OSError):
            continue
    findings += cabling_findings(lab.fabric, heard)
    try:
        if lab.fabric.ecn:
            findings += marking_findings(lab.fabric, pfc_client.marking(lab.paths.root))
        if lab.fabric.pfc:
            findings += pfc_findings(lab.fabric, pfc_client.thresholds(lab.paths.root))
    except TwinError:
        pass  # the controller is restarting or gone: the ports are compared next sweep
    return findings


class ConfigAudit:
    """Verdicts from sweeps: a finding is named once when it first appears, and again if it comes
    back after it was gone."""

    def __init__(self):
        self._named: set[Finding] = set()

    def observe(self, t: float, findings: list[Finding]) -> list[Verdict]:
        current = {Finding(f.kind, f.link, f.node) for f in findings}
        verdicts = [Verdict(t=t, detector=DETECTOR, kind=f.kind, link=f.link, node=f.node, confidence=1.0)
                    for f in sorted(current - self._named, key=lambda f: (f.link or "", f.node or "", f.kind))]
        self._named = current
        return verdicts


def attach(run, name: str) -> None:
    """Sweep the run's lab until the run ends; every new finding is a verdict."""
    audit = ConfigAudit()

    def loop(stopping) -> None:
        while not stopping.is_set():
            started = time.monotonic()
            findings = sweep(run.lab)
            for verdict in audit.observe(run.events.now(), findings):
                run.emit(name, verdict, source="builtin")
            stopping.wait(max(MIN_SWEEP_S, 10 * (time.monotonic() - started)))

    run.poll(name, loop)
