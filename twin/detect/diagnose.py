"""`twin diagnose LAB`: one command that looks everywhere an operator would and ranks suspects.

It reads routing state (BGP sessions, BFD peers, daemons: vtysh JSON), compares the running
configuration with the lab's intent (config-audit's sweep), runs the probe mesh with the probe
localizer for a while, and compares counters from before and after (interface drops and errors,
ports' frame-check (CRC) errors, qdisc drops and backlog, hosts' checksum errors). Every finding
is evidence for a link or a node; suspects are ranked by the weight of their evidence, and the
findings answer the four questions Tencent's one-click localization answers: a connection
failure, packet loss, a configuration anomaly, not enough performance.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from twin.detect import config_audit
from twin.detect.localizer import Localizer
from twin.lab.handle import Lab
from twin.lab.ports.counters import CounterReader
from twin.lab.status import lab_status
from twin.model.fabric import Fabric, link_key
from twin.probes.mesh import address_links
from twin.probes.run import run_probe_mesh
from twin.progress import NullProgress, Progress

# How much one finding weighs: routing state, a configuration that differs from the intent and a
# localizer verdict are strong, a counter is a hint.
WEIGHT = {"routing": 3.0, "configuration": 3.0, "localizer": 3.0, "probe_loss": 2.0, "counter": 1.0,
          "checksum": 1.0}
QUESTIONS = ("connection", "loss", "configuration", "performance")
# The question a finding answers, by where it came from (a counter says which itself: drops and
# errors are loss, a queue that does not drain is performance).
ANSWERS = {"routing": "connection", "configuration": "configuration", "localizer": "loss", "probe_loss": "loss",
           "counter": "loss", "checksum": "loss"}
MIN_LINK_LOSS = 0.002  # probe loss rate on a link's paths worth reporting


@dataclass
class Suspect:
    name: str  # "a -- b" (sorted) or a node
    score: float = 0.0
    evidence: list[str] = field(default_factory=list)
    questions: set[str] = field(default_factory=set)  # which of QUESTIONS its evidence answers

    def add(self, source: str, text: str, strength: float = 1.0, question: str | None = None) -> None:
        self.score = round(self.score + WEIGHT[source] * strength, 3)
        self.evidence.append(text)
        self.questions.add(question or ANSWERS[source])


def diagnose(lab: Lab, duration_s: float = 8.0, interval_ms: int = 50, progress: Progress | None = None) -> dict:
    progress = progress or NullProgress()
    fabric = lab.fabric
    suspects: dict[str, Suspect] = {}

    def suspect(name: str) -> Suspect:
        return suspects.setdefault(name, Suspect(name))

    progress.phase("routing state", None)
    _routing(lab, suspect)
    progress.phase("configuration against the intent", None)
    for finding in config_audit.sweep(lab):
        suspect(finding.link or finding.node).add("configuration", f"{finding.detail} (looks like {finding.kind})")
    localizer = Localizer(fabric.switch_links())
    verdicts, observed = [], []  # observed: (links of the path, sent, lost) per sample

    def watch(mesh) -> None:
        def on_interval(interval) -> None:
            verdicts.extend(localizer.observe(interval.t - mesh.epoch, interval.samples))
            observed.extend(({link_key(link) for link in s.links if link}, s.sent, s.lost) for s in interval.samples)
        mesh.listeners.append(on_interval)

    with CounterReader(lab) as reader:
        before = reader.read()
        probes = run_probe_mesh(lab, duration_s, interval_ms, "cover", progress,
                                name="diagnose", during=watch)
        after = reader.read()
    for v in verdicts:
        suspect(v.target.key).add("localizer", f"probe localizer named it ({v.kind}, confidence {v.confidence}) "
                                           f"{v.t:.1f} s into the probe run", v.confidence or 1.0)
    for link, (sent, lost) in _unexplained_loss(observed, {v.target.key for v in verdicts}).items():
        if sent and lost / sent >= MIN_LINK_LOSS:
            suspect(link).add("probe_loss", f"{lost} of {sent} probes lost on paths crossing it "
                                            f"({100 * lost / sent:.1f} %)", min(1.0, 10 * lost / sent))
    _counters(fabric, before, after, suspect)
    ranked = sorted(suspects.values(), key=lambda s: -s.score)
    return {"duration_s": duration_s, "probes": {k: probes[k] for k in ("paths", "sent", "lost", "achieved_pps")},
            "uncovered_links": probes["uncovered"],
            "answers": {question: [s.name for s in ranked if question in s.questions] for question in QUESTIONS},
            "suspects": [{"name": s.name, "score": s.score, "evidence": s.evidence,
                          "questions": [q for q in QUESTIONS if q in s.questions]} for s in ranked]}


def _unexplained_loss(observed: list[tuple[set, int, int]], named: set[str]) -> dict[str, list[int]]:
    """Per link, probes sent and lost on its paths, leaving out paths that cross another link
    the localizer named: their loss is explained, and would smear onto every link they share."""
    stats: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for links, sent, lost in observed:
        for link in links:
            if not (links - {link}) & named:
                stats[link][0] += sent
                stats[link][1] += lost
    return stats


def _routing(lab: Lab, suspect) -> None:
    fabric = lab.fabric
    by_address = address_links(fabric)
    for status in lab_status(lab):
        for daemon, alive in status.daemons.items():
            if not alive:
                suspect(status.name).add("routing", f"FRR {daemon} is not running on {status.name}")
        if status.error:
            suspect(status.name).add("routing", f"{status.name} does not answer: {status.error}")
        for peer, session in status.bgp.items():
            if session != "Established":
                link = fabric.find_link(status.name, peer)
                name = link_key(link.name) if link else status.name
                suspect(name).add("routing", f"BGP {status.name} -> {peer} is {session}", 0.5)
        for address, bfd in status.bfd.items():
            if bfd != "up":
                name = by_address.get(address)
                suspect(link_key(name) if name else status.name).add(
                    "routing", f"BFD {status.name} -> {address} is {bfd}", 0.5)
        if status.ecmp_short:
            suspect(status.name).add("routing", f"{status.name} lacks ECMP next hops for "
                                                f"{len(status.ecmp_short)} host prefixes", 0.3, "performance")


def _counters(fabric: Fabric, before, after, suspect) -> None:
    port_link = {(end.node, end.ifname): link_key(link.name) for link in fabric.links for end in (link.a, link.b)}
    for key, now in after.interfaces.items():
        was = before.interfaces.get(key, now)
        link = port_link.get(key)
        if link is None:
            continue
        crc = now.get("rx_crc_errors", 0) - was.get("rx_crc_errors", 0)
        for counter in ("rx_crc_errors", "rx_dropped", "tx_dropped", "rx_errors", "tx_errors", "qdisc_drops"):
            delta = now.get(counter, 0) - was.get(counter, 0) - (crc if counter == "rx_errors" else 0)
            if delta > 0:
                suspect(link).add("counter", f"{key[0]}:{key[1]} {counter} +{delta}")
        if now.get("backlog_bytes", 0) > 0 and was.get("backlog_bytes", 0) > 0:
            suspect(link).add("counter", f"{key[0]}:{key[1]} queue not draining ({now['backlog_bytes']} bytes "
                                         "held before and after: paused?)", question="performance")
    for (host, counter), value in after.checksum_errors.items():
        delta = value - before.checksum_errors.get((host, counter), 0)
        if delta > 0:
            suspect(host).add("checksum", f"{host} counted {delta} {counter}: packets arriving damaged")
