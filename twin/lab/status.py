"""`twin lab status`: per switch BGP sessions, BFD peers (vtysh JSON), ECMP completeness (the kernel's
FIB), daemon health; the fabric's queues: PFC controller, pauses and queue drops per port."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from twin.errors import RuntimeBackendError
from twin.lab.handle import Lab
from twin.lab.pfc import client as pfc_client
from twin.lab.pfc import published as pfc_counters
from twin.lab.ports.counters import CounterReader
from twin.lab.routing import lldp
from twin.lab.routing.converge import kernel_next_hops
from twin.lab.routing.frr import daemon_health, vtysh_json
from twin.lab.routing.frr_answers import bgp_peers
from twin.model.buffers import lab_marking
from twin.model.ecmp import expected_next_hops


@dataclass
class SwitchStatus:
    name: str
    daemons: dict[str, bool]
    bgp: dict[str, str] = field(default_factory=dict)  # peer name -> session state
    bfd: dict[str, str] = field(default_factory=dict)  # peer address -> up/down/...
    bgp_addresses: dict[str, str] = field(default_factory=dict)  # peer address -> session state
    ecmp_widths: dict[int, int] = field(default_factory=dict)  # next hops -> host prefixes installed with so many
    ecmp_ok: int = 0  # host prefixes with the expected next-hop count
    ecmp_expected: int = 0
    ecmp_short: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def healthy(self) -> bool:
        return (all(self.daemons.values()) and bool(self.daemons) and self.error is None
                and all(s == "Established" for s in self.bgp.values())
                and all(s == "up" for s in self.bfd.values()) and self.ecmp_ok == self.ecmp_expected)


def switch_status(lab: Lab, name: str, expected: dict) -> SwitchStatus:
    status = SwitchStatus(name=name, daemons=daemon_health(lab, name) | lldp.health(lab, name),
                          ecmp_expected=len(expected[name]))
    try:
        summary = vtysh_json(lab, name, "show bgp summary json")
        for address, peer in (bgp_peers(summary) or {}).items():
            label = peer.get("desc", address).split(" via ")[0]
            status.bgp[label] = status.bgp_addresses[address] = peer.get("state", "unknown")
        for peer in vtysh_json(lab, name, "show bfd peers json") or []:
            status.bfd[peer.get("peer", "?")] = peer.get("status", "unknown")
        # what forwards, read as raw netlink: with zebra's `show ip route json` pod128's statuses
        # took 6.3 s at rest, with this 2.0 s; the telemetry asks every switch every 2 s
        installed = kernel_next_hops(lab, name)
        for prefix, want in expected[name].items():
            width = installed.get(prefix, 0)
            status.ecmp_widths[width] = status.ecmp_widths.get(width, 0) + 1
            if width == want:
                status.ecmp_ok += 1
            else:
                status.ecmp_short.append(f"{prefix} {installed.get(prefix, 0)}/{want}")
    except RuntimeBackendError as exc:
        status.error = exc.message
    except OSError as exc:  # the switch's namespace is gone
        status.error = f"its routes cannot be read ({exc.strerror or exc})"
    return status


def lab_status(lab: Lab) -> list[SwitchStatus]:
    expected = expected_next_hops(lab.fabric)
    names = [n.name for n in lab.fabric.local_switches]
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda n: switch_status(lab, n, expected), names))


def as_dict(statuses: list[SwitchStatus]) -> list[dict]:
    return [asdict(s) | {"healthy": s.healthy} for s in statuses]


@dataclass
class QueueStatus:
    lossless: bool
    controller: bool  # the PFC controller runs (lossless or marking labs)
    marking: tuple[int, int, float] | None = None  # ECN: kmin, kmax (bytes), pmax; None: no marking
    reaction: dict = field(default_factory=dict)  # the controller's reaction times
    errors: list[str] = field(default_factory=list)
    ports: list[dict] = field(default_factory=list)  # ports with pauses, a held egress or queue drops

    @property
    def healthy(self) -> bool:
        return self.controller or not (self.lossless or self.marking)


def queue_status(lab: Lab) -> QueueStatus:
    """Per port: PFC pauses received and sent, paused time, held now, queue now and at most, ECN
    marks, and the packets its queue dropped (qdisc counters) since the lab came up."""
    document = pfc_counters.read(lab.state.directory)
    pfc = pfc_counters.ports(document)
    with CounterReader(lab) as reader:
        drops = {key: values.get("qdisc_drops", 0)
                 for key, values in reader.read(checksums=False, qdiscs=True).interfaces.items()}
    status = QueueStatus(lossless=lab.fabric.pfc, controller=pfc_client.running(lab.state),
                         marking=lab_marking(lab.fabric) if lab.fabric.ecn else None)
    if document:
        status.reaction = document["controller"].get("reaction", {})
        status.errors = document["controller"].get("errors", [])
    for key in sorted(set(pfc) | set(drops)):
        counter = pfc.get(key, pfc_counters.PortCounters())
        row = {"port": f"{key[0]} {key[1]}", "queue_drops": drops.get(key, 0), **asdict(counter)}
        if counter.rx_pause or counter.tx_pause or counter.paused or row["queue_drops"] or counter.watchdog \
                or counter.xoff_times or counter.ecn_marked or counter.steered_in or counter.steered_away \
                or counter.late:
            status.ports.append(row)
    return status
