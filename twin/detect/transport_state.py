"""transport-state: name the lossy link from the job's own transport, with no probe traffic: the
end-side detection Xingmai runs before any probe mesh (a failure named in under 600 ms from the
hosts' RDMA state), and 007's voting over the paths of the flows that retransmit.

Evidence. Every rank writes its QPs' state every 100 ms (collectives/worker.py `qps`): the
QP's 5-tuple, the path its NIC discovered for it from its own socket (roce/paths.py: the switch
that answered each TTL), and counters since it opened: data packets sent, NAKs received,
retransmission timeouts. A gloo rank writes its TCP connections in the same fields, from the
kernel's TCP_INFO, their paths discovered with raw segments of their 5-tuples
(collectives/tcp_state.py): segments sent, retransmissions its peer's acknowledgements asked for,
retransmission timeouts, and how long its unacknowledged data has waited.

Each EVERY_S the detector turns what changed into one sample per QP:
the QP's path (its host link, the links the answering switches' ingress addresses name, the
destination's host link: probes/mesh.py PathNames, which also fills a silent hop where the model
pins it), `sent` the packets it sent, `lost` its loss events (a NAK says a data packet was lost
on the way there; a timeout, that nothing came back, counted on the way there too). A QP whose
outstanding packets have waited STALL_MS for an acknowledgement has lost one, at once: a lost tail
(or a black hole) leaves a QP silent until its timer fires, 4.3 s at NCCL's default, and the
wait is what a NIC's state shows meanwhile. The timeout that ends the wait is that same loss
(losses: NAKs plus the larger of timeouts and waits).

A QP's path discoveries are probes too (007 traces the flows that retransmit): a QP discovers
again when it loses or waits, and each discovery's TTL t (1 to the switches on its path) is one
probe over the path's first t links, lost when switch t did not answer. Where the answers stop
is where a black hole or a dead link stops the QP's packets, which its own counters cannot say.
A discovery that no switch answered, not even the QP's own leaf, is not taken: its NIC did not
hear the answers (tests/unit/test_replay.py, replay-unheard).

Naming is probe-likelihood's (likelihood.py) over those samples: a QP is a probed path that
carries thousands of packets a second, so a link whose QPs lose while the QPs beside it carry
their packets clean stands out within a few intervals. Its window and persistence are set in
seconds for EVERY_S. A path the NIC has not discovered yet (its first 100 ms) is skipped.

Limits: multipath QPs (sprayed, no one path) are not read; on a lossy fabric (`pfc: false`)
congestion drops are loss too, and the detector names the congested link. A TCP connection
that carries little (gloo's small messages, a connection the ring does not use) says little.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from twin.detect.likelihood import LikelihoodLocalizer
from twin.detect.verdicts import Verdict
from twin.model.fabric import Fabric, link_key
from twin.model.nics import fabric_nics, nic_links
from twin.probes.mesh import PathNames, PathSample
from twin.probes.trace import unless_silent
from twin.procs import INSTRUMENT_NICE, set_priority
from twin.roce.paths import STALLED_S
from twin.roce.qp import ib_timeout_s

DETECTOR = "transport-state"
TRANSPORT_FILE = "transport.jsonl"  # in the results folder: what the detector read (Recording)
EVERY_S = 0.2  # the QPs' counters pooled this long per interval (the ranks write every 0.1 s)
MIN_CONFIDENCE = 0.9
TCP_SILENT_S = 1.6  # Linux's minimum retransmission timeout (200 ms) backed off three times
STALL_MS = round(STALLED_S * 1000)  # a QP waiting this long for an acknowledgement lost a packet
WINDOW_KEPT = 64  # intervals of a QP's losses kept for own_loss (the localizer's window is 10)


@dataclass
class QpTotals:
    """What a QP had counted when last read, and the waits the detector saw."""
    sent: int = 0
    naks: int = 0
    timeouts: int = 0
    stalls: int = 0
    waiting_ms: int = 0

    @property
    def lost(self) -> int:
        return self.naks + max(self.timeouts, self.stalls)


def trace_port(flow: int, ttl: int) -> int:
    """The key of a QP's TTL probes in the localizer's pool (which keys paths by source, destination
    and `sport`): apart from its own packets' (`flow`, positive) and from every other QP's."""
    return -(flow * 16 + ttl)


class QpEvidence:
    """The QPs' states as the ranks write them, turned into one interval's path samples."""

    def __init__(self, fabric: Fabric):
        self.names = PathNames(fabric)
        nics = fabric_nics(fabric)
        self.nic_at = {nic.address: nic.label for nic in nics}
        # NIC label -> its leaves (a dual-port NIC's two); a port's host link -> the port's label
        self.leaves_of = {nic.label: tuple(link.a.node for link in nic_links(fabric, nic.host, nic.ifname))
                          for nic in nics}
        self.port_of = {link.name: f"{link.b.node}:{link.b.ifname}" for link in fabric.links if link.kind == "host"}
        self.leaves_of.update({port: (self.names.ends[link][0],) for link, port in self.port_of.items()})
        self.graph = fabric.switch_graph()
        self._hops: dict[tuple[str, str], int] = {}
        self._leaf_distances: dict[str, dict[str, int]] = {}
        self._totals: dict[tuple, QpTotals] = {}
        self._known: dict[tuple, tuple[str, ...]] = {}  # a QP's last path with every link named
        self._traced: dict[tuple, int] = {}  # a QP's last discovery taken as probes
        # a QP's key in the localizer's pool: TCP connections accepted on one port share their sport
        self._flows: dict[tuple, int] = {}
        self._pending: dict[tuple, PathSample] = {}
        # Per QP (its key in the pool), its NAKs and its timeouts or waits, interval by interval
        # ((interval, NAKs, timeouts)), and whether its NAKs are inferred (a gloo connection's):
        # whether its loss of the last `window` intervals was surely on its own way (own_loss).
        self._interval, self.window = 0, 1
        self._losses: dict[int, deque[tuple[int, int, int]]] = {}
        self._inferred: dict[int, bool] = {}
        self._lock = threading.Lock()

    def record(self, record: dict, nic: str) -> None:
        """A rank's record (the collective workload hands every one over): `qps` ones are read."""
        if record.get("event") != "qps":
            return
        with self._lock:
            for state in record["qps"]:
                self._take(nic, state)

    def _take(self, src: str, state: dict) -> None:
        dst = self.nic_at.get(state["dst"])
        # One QP while it is open: its number and its peer's socket. Not its source port, which a
        # dodging QP changes (its counters run on; a TCP connection's number is its port).
        key = (src, state["qp"], state["dst"], state["dport"])
        before = self._totals.get(key)
        if before is None or state["sent"] < before.sent or state["naks"] < before.naks:  # a new QP on the port
            before = QpTotals()
        waiting = state.get("waiting_ms", 0)
        waited_on = before.waiting_ms >= STALL_MS and waiting >= before.waiting_ms  # the same wait, still
        new_wait = waiting >= STALL_MS and not waited_on
        now = QpTotals(state["sent"], state["naks"], state["timeouts"], before.stalls + new_wait, waiting)
        self._totals[key] = now
        sent, lost = now.sent - before.sent, now.lost - before.lost
        links = self._links(key, src, state.get("path"), dst) if dst else None
        if links is None:
            return
        flow = self._flows.setdefault(key, len(self._flows) + 1)
        timed_out = max(now.timeouts, now.stalls) - max(before.timeouts, before.stalls)
        if now.naks > before.naks or timed_out > 0:
            losses = self._losses.setdefault(flow, deque())
            losses.append((self._interval, now.naks - before.naks, timed_out))
            while losses and self._interval - losses[0][0] > WINDOW_KEPT:
                losses.popleft()
        self._inferred[flow] = "spurious" in state  # a gloo connection's state (tcp_state.py)
        if state.get("traced", 0) > self._traced.get(key, 0):
            self._traced[key] = state["traced"]
            # A discovery that no switch answered, not even the QP's own leaf, says nothing of the
            # path: a lossy link silences the TTLs past it, never its own leaf's over a link the
            # QP's packets cross meanwhile; the NIC did not hear its answers (a CI run named the
            # QP's healthy host link from one such discovery: 5 TTL probes "lost" on it at once).
            if state["path"]:
                self._discovery(src, dst, flow, links, state["path"])
        if sent <= 0 and lost <= 0:
            return
        sent = max(sent, lost)  # a wait or timeout with nothing new sent: the packet it gave up on
        self._add(PathSample(src, dst, flow, links, sent, sent - lost))

    def _discovery(self, src: str, dst: str, flow: int, links: tuple, answers: dict) -> None:
        """A discovery's TTL probes, each over the first TTL links of the QP's path, toward the switch
        where it expired (not toward the QP's destination: that switch answers it, whatever its
        route toward there does), keyed apart from the QP's own packets (`trace_port`)."""
        probed = links[:self.hops(src, dst)]  # the hops past an unknown one say nothing: _hops_of stops there
        for ttl, (_link, at) in enumerate(self._hops_of(src, probed), 1):
            self._add(PathSample(src, at, trace_port(flow, ttl), links[:ttl], 1, int(str(ttl) in answers)))

    def _add(self, sample: PathSample) -> None:
        pending = self._pending.get((sample.src, sample.dst, sample.sport))
        if pending is None:
            self._pending[(sample.src, sample.dst, sample.sport)] = sample
        else:
            pending.links, pending.sent = sample.links, pending.sent + sample.sent
            pending.received += sample.received

    def _links(self, key: tuple, src: str, path: dict | None, dst: str) -> tuple[str | None, ...] | None:
        """The QP's path as link names; None until its NIC has discovered it. A rediscovery that a
        lossy link silenced past it, agreeing where it was answered, is the QP's last whole path."""
        if path is None:
            return None
        port = src if src in self.names.host_link else self._port(path.get("1"))
        if port is None:
            return None
        offenders = [path.get(str(ttl)) for ttl in range(2, self.hops(src, dst) + 1)]
        links = unless_silent(self._known.get(key), self.names.path(port, offenders, dst))
        if None not in links:
            self._known[key] = links
        return links

    def _port(self, first_answer: str | None) -> str | None:
        """The port of a dual-port NIC a QP sends from (its LAG's choice): the one whose leaf
        answered its discovery's first TTL, from the leaf's address on that port's link."""
        link = self.names.addresses.get(first_answer) if first_answer else None
        return self.port_of.get(link) if link else None

    def hops(self, src: str, dst: str) -> int:
        """Switches on a shortest path between two NICs (the TTLs that switches answer); a dual-port
        NIC's leaves are wired alike, and the nearer pair is the one a route takes."""
        key = (src, dst)
        if key not in self._hops:  # a dual-plane fabric's -a leaves reach no -b leaf: leave those out
            self._hops[key] = 1 + min(self._distances(a).get(b, math.inf)
                                      for a in self.leaves_of[src] for b in self.leaves_of[dst])
        return self._hops[key]

    def _distances(self, leaf: str) -> dict[str, int]:
        """Hops from a leaf to every node, one search per leaf (not one per NIC pair)."""
        if leaf not in self._leaf_distances:
            self._leaf_distances[leaf] = nx.single_source_shortest_path_length(self.graph, leaf)
        return self._leaf_distances[leaf]

    def ambiguous(self) -> list[list[str]]:
        """The links the QPs' own packets cannot tell apart, class by class: crossed by exactly the
        same QPs that carried data (a loss on one is a loss on all; only a discovery's TTL probe,
        lost where a link drops it, separates them). Two ways of counting, both published: a link
        whichever way a QP crosses it (a fault both ways), and a link in one direction (a one-way
        drop, a bad optic: a host link's uplink that carries one QP is crossed by exactly the QPs
        of the leaf's uplink that QP takes, though the host link's other direction carries other
        QPs). The grading takes a set verdict within either as honest."""
        with self._lock:
            both: dict[str, set[tuple]] = {}
            one_way: dict[tuple[str, str], set[tuple]] = {}
            for key, links in self._known.items():
                if self._totals[key].sent <= 0:
                    continue
                for hop in self._hops_of(key[0], links):
                    both.setdefault(hop[0], set()).add(key)
                    one_way.setdefault(hop, set()).add(key)
        classes: set[tuple[str, ...]] = set()
        for crossing in (both, one_way):
            grouped: dict[frozenset, set[str]] = {}
            for hop, qps in crossing.items():
                grouped.setdefault(frozenset(qps), set()).add(hop if isinstance(hop, str) else hop[0])
            classes |= {tuple(sorted(group)) for group in grouped.values() if len(group) > 1}
        return sorted(list(group) for group in classes)

    def _hops_of(self, src: str, links: tuple[str | None, ...]) -> Iterator[tuple[str, str]]:
        """A path's links in order from NIC src, each (canonically named) with the node it crosses
        toward, up to the first link not known."""
        at = src.split(":")[0]
        for link in links:
            if link is None:
                return
            a, b = self.names.ends[link]
            at = b if at == a else a
            yield link_key(link), at

    def take(self) -> list[PathSample]:
        """The samples counted since the last call."""
        with self._lock:
            samples, self._pending = list(self._pending.values()), {}
            self._interval += 1
        return samples

    def own_loss(self, key: tuple) -> bool:
        """Was the loss of this pooled path ((src, dst, sport) as the localizer keys it) over the last
        `window` intervals surely on its own way? A RoCE QP's NAKs are its peer's word that data was
        lost there (the NAK came back), whatever it waited for meanwhile (a lost tail waits for the
        timer). A gloo connection's losses are inferred from what it sent again, and after a timeout
        that may be for ACKs lost on the way back, over the reverse path's links, their D-SACKs with
        them (a black hole toward its source: a few tail-loss probes among timeouts backing off);
        its loss is its own where its NAKs outnumber its timeouts and waits more than twice (5 %
        bit flips on its path: 155 against 5). A TTL probe's loss may be its answer's: never."""
        flow = key[2] if len(key) == 3 else 0
        if flow <= 0:
            return False
        with self._lock:
            recent = [(naks, waits) for at, naks, waits in self._losses.get(flow, ())
                      if self._interval - at <= self.window]
            inferred = self._inferred.get(flow, False)
        naks, waits = sum(n for n, _ in recent), sum(w for _, w in recent)
        return naks > 0 and (not inferred or naks > 2 * waits)


def silent_s(workload: dict) -> float:
    """How long a job's QP or connection can wait without a word (`workload`: a collective's
    settings, `transport` and for RoCE `ib_timeout` and `time_scale`): RoCE's retransmission timer;
    TCP's, backed off three times from its 200 ms floor (it resends at each, and says so)."""
    if workload.get("transport") == "roce":
        return ib_timeout_s(workload["ib_timeout"], workload["time_scale"])
    return TCP_SILENT_S


def localizer(fabric: Fabric, silent_s: float = 0.0, evidence: QpEvidence | None = None) -> LikelihoodLocalizer:
    """probe-likelihood's naming, persistent over one interval: a QP's wait is one loss that lasts
    (a probe's loss of one interval may be a route change's; a QP moved by one recovers, its loss
    named on the link it left, which is the one that failed). A name is kept `silent_s` longer
    than a probe detector keeps it: a QP that waits for its timer says nothing meanwhile, and its
    fault, named once, is not named again (as a set of the links of the one path that speaks next).
    A name below MIN_CONFIDENCE is not given: a job's few paths leave rivals the probes' many would
    tell apart, and once the wait for them runs out probe-likelihood names its best guess (a host
    link at 0.23 on mini, wrong; one of two links of one QP's path at 0.50, wrong half the time).
    Their set is named instead when it lies within one of the classes the `evidence`'s QPs cannot
    tell apart (QpEvidence.ambiguous: on mini, a leaf-spine link's loss is one QP's, whose host
    links, leaf-spine and spine-leaf links no other QP crosses in its direction), at the set's
    posterior; a set of rivals other QPs' clean packets had not yet ruled out is wider than that
    and is not named."""
    naming = LikelihoodLocalizer.for_interval(fabric.switch_links(), EVERY_S)
    naming.detector = DETECTOR  # its verdicts are this detector's, named by probe-likelihood's model
    naming.persist = 1
    naming.min_confidence = MIN_CONFIDENCE
    naming.forget_after += math.ceil(silent_s / EVERY_S)
    if evidence is not None:
        naming.traffic, evidence.window = evidence, naming.window
    return naming


class Recording:
    """The QPs' states as the detector reads them, kept with the run's results (TRANSPORT_FILE: `t`
    since the run's start as the rank wrote it, `received` when the detector had it, the rank's
    `nic`, its `qps`) for `twin detect replay`, which names from `t` (the detector, not the
    machine's delays: a busy runner reads the ranks' records later)."""

    def __init__(self, path: Path, t0: float):
        self.out, self.t0 = open(path, "a", buffering=1 << 16), t0
        self._lock = threading.Lock()

    def write(self, record: dict, nic: str) -> None:
        if record.get("event") != "qps":
            return
        line = json.dumps({"t": round(record["t"] - self.t0, 4), "received": round(time.monotonic() - self.t0, 4),
                           "nic": nic, "qps": record["qps"]}) + "\n"
        with self._lock:
            if not self.out.closed:  # the workloads' last records may come after the run's end
                self.out.write(line)

    def close(self) -> None:
        with self._lock:
            self.out.close()


def replayed(fabric: Fabric, rows: Iterable[dict], silent: float,
             classes: list[dict] | None = None) -> Iterator[Verdict]:
    """The verdicts the live detector gives on recorded rows (as Recording writes them, in time
    order), named at every EVERY_S from the first row; into `classes`, as the live detector
    records them, what the QPs leave ambiguous whenever it changes ({"t", "ambiguous"})."""
    evidence = QpEvidence(fabric)
    naming = localizer(fabric, silent, evidence)
    due, recorded = None, []

    def interval(t: float) -> Iterator[Verdict]:
        nonlocal recorded
        yield from naming.observe(t, evidence.take())
        now = evidence.ambiguous()
        if classes is not None and now != recorded:
            classes.append({"t": t, "ambiguous": now})
            recorded = now

    for row in rows:
        while due is not None and row["t"] >= due:
            yield from interval(due)
            due += EVERY_S
        due = row["t"] + EVERY_S if due is None else due
        evidence.record({"event": "qps", "qps": row["qps"]}, row["nic"])
    if due is not None:
        yield from interval(due)


def attach(run, name: str) -> None:
    """Read every collective workload's QPs and connections; name links each EVERY_S until the run
    ends. What it read is kept with the results (Recording)."""
    evidence = QpEvidence(run.lab.fabric)
    recording = Recording(run.events.path.parent / TRANSPORT_FILE, run.events.t0)
    read = [w for w in run.workloads if hasattr(w, "listeners")]
    for workload in read:
        workload.listeners.append(recording.write)
        workload.listeners.append(evidence.record)
    naming = localizer(run.lab.fabric, max((silent_s({"transport": w.spec.transport, **w.spec.roce}) for w in read),
                                           default=0.0), evidence)

    def loop(stopping) -> None:
        set_priority(INSTRUMENT_NICE)  # an instrument, ahead of the load it watches (procs.py)
        recorded: list = []
        while not stopping.wait(EVERY_S):
            for verdict in naming.observe(run.events.now(), evidence.take()):
                run.emit(name, verdict, source="builtin")
            classes = evidence.ambiguous()
            if classes != recorded:  # what the QPs leave ambiguous, for the grading (results/grading.py)
                run.events.emit("detector", op="ambiguous", detector=name, ambiguous=classes)
                recorded = classes
        recording.close()

    run.poll(name, loop)
