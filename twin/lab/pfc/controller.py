"""The PFC controller of a lossless lab: one process, started by `twin lab up`, ended by its pid.

    python -m twin.lab.pfc.controller <lab dir>

It loads the queue programs (queues.py), then sleeps on their ring buffer and acts per event:
- XOFF(queue, ingress): close the gate of the upstream port feeding that ingress (one reason per
  congested queue it feeds); XON(queue): drop that reason from every port it paused, and open
  each port left without a reason. A paused port's own queue fills in turn, so pauses spread
  hop by hop back to the senders, as PFC does.
- Faults hold ports through the control socket (client.py): `hold` (pfc_pause, pfc_storm) adds a
  reason of their own, timed or for good; `tune` changes a queue's thresholds, its ECN marking or
  a port's watchdog.
- The PFC watchdog: a port held longer than its watchdog time stops honouring pauses: its gate
  opens and an nftables egress rule drops what it sends, until its pauses end.
- Twice a second, queues above XOFF and counts that did not move are checked against their
  qdisc's backlog: what a queue dropped without a dequeue (a link going down, an overflow) is
  taken off its count, and a queue that falls below XON so releases its senders.
Counters are published every 100 ms (counters.py).

The reaction (kernel event to gate message, measured per event and published) must stay well
inside the headroom the buffers reserve for it (model/buffers.py). So: SCHED_FIFO, so the busy lab
never preempts it; epoll, never a busy wait; every turn does the pending events first and at
most one slower step (a node's qdisc dump, encoding the publication), each well under a
millisecond; nothing waits for the file system or another process: the publication is stored by
a thread one real-time step below the loop (lab/publisher.py: it holds the interpreter lock only
between its system calls, and is never kept off the CPU holding it), nft runs as a child it does
not wait for.
"""

from __future__ import annotations

import json
import math
import os
import select
import socket
import subprocess
import sys
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

from twin.lab import nft, publisher
from twin.lab.ebpf.layout import EVENT, XOFF, XON
from twin.lab.handle import Lab
from twin.lab.kernel import rawdump
from twin.lab.pfc import published as published
from twin.lab.pfc.backlog import BacklogReader
from twin.lab.pfc.gate import Gates
from twin.lab.pfc.queues import Queues
from twin.model import queue_tree
from twin.model.buffers import frame_bytes, switch_queue_limit
from twin.model.ports import Port, ports
from twin.procs import real_time, stop_on_signals

SOCKET = "control.sock"
FLUSH_S = 0.1
RESYNC_S = 0.5
TICK_S = 0.005  # timer resolution while something is held (timed pauses, watchdogs)
RT_PRIORITY = 10


@dataclass
class Hold:
    """A fault's pause of some ports: for good (pause_ms None) or pause_ms every period_ms."""
    ports: list[Port]
    pause_ms: float | None
    period_ms: float | None
    started: float
    paused: bool = False
    next_change: float = 0.0
    pauses: int = 0
    paused_s: float = 0.0
    since: float = 0.0
    most_held: int = 0  # most ports of the lab held at once while this hold was on (a storm's spread)
    watchdog_s: float | None = None  # when a watchdog turned one of its ports to drops


@dataclass
class Tuning:
    """A fault's change to one queue (pfc_storm, ECN settings), undone at its release."""
    queue_id: int | None
    port: Port
    thresholds: tuple[int, int] | None  # the queue's (xoff, xon) before
    watchdog_ms: float | None
    marking: tuple[int, int, float] | None = None  # its (kmin, kmax, pmax) before


WATCHDOG_TABLES = nft.table_name("pfcwd-")  # the start of every watchdog's table name


def watchdog_table(port: Port) -> str:
    """The nft table of a port the PFC watchdog put in drop mode (in its node's namespace)."""
    return nft.table_name(f"pfcwd-{port.ifname}")


class Latencies:
    """Kernel event to some point of handling it: a histogram of 5 % wide bins from 1 us, so adding
    costs one log and a summary reads a few hundred bins (a sorted sample every 100 ms cost 5 %
    of the controller)."""

    BINS = 400
    BASE = 1.05

    def __init__(self):
        self.bins = [0] * self.BINS
        self.count = 0
        self.worst = 0

    def add(self, ns: int) -> None:
        self.count += 1
        if ns > self.worst:
            self.worst = ns
        self.bins[min(self.BINS - 1, int(math.log(max(ns, 1000) / 1000, self.BASE)))] += 1

    def _quantile(self, q: float) -> int:
        rank, seen = q * self.count, 0
        for number, n in enumerate(self.bins):
            seen += n
            if seen >= rank:
                return round(self.BASE ** (number + 1))  # the bin's upper edge, in us
        return round(self.worst / 1000)

    def summary(self) -> dict:
        if not self.count:
            return {"events": 0}
        worst = round(self.worst / 1000)
        return {"events": self.count, "p50_us": min(worst, self._quantile(0.5)),
                "p99_us": min(worst, self._quantile(0.99)), "p999_us": min(worst, self._quantile(0.999)),
                "max_us": worst}


class Controller:
    def __init__(self, lab: Lab):
        self.lab_dir, self.runtime, self.fabric = lab.paths.root, lab.runtime, lab.fabric
        fabric = lab.fabric
        self.queues = Queues(lab)
        self.gates = Gates(lab)
        self.ports = ports(fabric)
        self.counters = {p: published.PortCounters() for p in self.ports}
        self.reasons: dict[Port, set[str]] = defaultdict(set)
        self.paused_since: dict[Port, float] = {}
        self.paused_by_queue: dict[int, dict[Port, int]] = defaultdict(dict)  # queue -> upstream -> XOFF phase
        self.released_phase: dict[int, int] = defaultdict(int)  # queue -> the last XOFF phase that ended
        self.ingress: dict[tuple[str, int], Port] = {}  # (switch, ingress ifindex) -> upstream port
        self.queue_nodes = [q.port.node for q in self.queues.queues]
        self.queue_reasons = [f"q{q.id}" for q in self.queues.queues]
        self.sent_counters: dict[tuple[str, int], published.PortCounters] = {}  # same key -> its counters
        self.holds: dict[str, Hold] = {}
        self.tunings: dict[str, list[Tuning]] = {}
        self.watchdog_ms: dict[Port, float] = {}
        self.dropping: dict[Port, str] = {}  # port -> its watchdog's nft table
        self.children: list[subprocess.Popen] = []  # nft runs not waited for
        self.readers: dict[str, BacklogReader] = {}
        self.indexes: dict[str, dict[str, int]] = {}  # node -> ifname -> index
        self.pending_checks: deque[str] = deque()  # nodes whose queues to compare with the kernel
        self.check_queues: dict[str, list[int]] = {}
        self.last_seen: dict[int, int] = {}
        self.excess: dict[int, int] = {}  # queue -> count above its backlog at the last check
        self.frame = frame_bytes(fabric.mtu)
        self.reactions, self.wakeups = Latencies(), Latencies()  # kernel event -> gate sent, -> read
        self.errors: list[str] = []
        self.corrections = 0
        self.phases_ended_early = 0
        self.busy_s = self.longest_turn_s = self.publish_s = 0.0
        self.dirty = True
        self.marks_published = 0  # ECN marks and moved packets counted at the last publication
        # counters the programs move without an event (ECN marks, adaptive routing's moves)
        self.counts_quietly = self.fabric.ecn or self.fabric.load_balance != "ecmp"
        self.publisher: publisher.Publisher | None = None  # started by run(), after the kicker's fork
        self.stopping = False
        self.orphaned = False  # the lab's state disappeared: stop, leaving its files alone

    # --- set-up -----------------------------------------------------------------------------
    def start(self) -> None:
        self.queues.attach()
        self.ingress = self.queues.ingress_index()
        for (node, index), upstream in self.ingress.items():
            ifname = next(link.endpoint(node).ifname for link in self.fabric.links_of(node)
                          if link.peer(node).node == upstream.node)
            self.sent_counters[(node, index)] = self.counters[Port(node, ifname)]
        self.gates.open_ports(self.ports)
        self.gates.start_kicker()
        for port in self.ports:  # an earlier controller may have died with gates closed
            self.gates.open(port)
        self.gates.flush()
        for node in sorted({q.port.node for q in self.queues.queues}):
            self.readers[node] = BacklogReader(rawdump.socket_in(self.runtime.netns_path(node)), queue_tree.GATE_HANDLE)
            self.indexes[node] = self.gates.indexes(node)

    # --- reasons: why a port is held ------------------------------------------------------------
    def _hold(self, port: Port, reason: str, now: float) -> None:
        reasons = self.reasons[port]
        if not reasons and port not in self.dropping:
            self.paused_since[port] = now
            counter = self.counters[port]
            counter.rx_pause += 1
            counter.paused = True
            self.gates.close(port)
            self.dirty = True
        reasons.add(reason)

    def _release(self, port: Port, reason: str, now: float) -> None:
        reasons = self.reasons.get(port)
        if not reasons or reason not in reasons:
            return
        reasons.discard(reason)
        if reasons:
            return
        counter = self.counters[port]
        counter.paused_s += now - self.paused_since.pop(port, now)
        counter.paused = False
        if port in self.dropping:
            self._leave_drop_mode(port)
        else:
            self.gates.open(port)
        self.dirty = True

    # --- kernel events ----------------------------------------------------------------------------
    def on_events(self) -> None:
        """Every event on the ring, then the gate messages they call for, sent in one go. The
        reaction counted for each event is to the moment its batch's messages were sent."""
        woke_ns, now = time.monotonic_ns(), time.monotonic()
        stamps = []
        for record in self.queues.events.records():
            queue_id, ifindex, kind, _pad, phase, kernel_ns = EVENT.unpack(record)
            stamps.append(kernel_ns)
            if kind == XOFF:
                if phase <= self.released_phase[queue_id]:
                    continue  # lost the race with the XON that ended its phase
                key = (self.queue_nodes[queue_id], ifindex)
                upstream = self.ingress.get(key)
                if upstream is None:
                    continue
                paused = self.paused_by_queue[queue_id]
                paused[upstream] = max(phase, paused.get(upstream, 0))
                self._hold(upstream, self.queue_reasons[queue_id], now)
                self.sent_counters[key].tx_pause += 1
            elif kind == XON:
                self._end_phase(queue_id, phase, now)
        self.gates.flush()
        sent_ns = time.monotonic_ns()
        for kernel_ns in stamps:
            self.wakeups.add(woke_ns - kernel_ns)
            self.reactions.add(sent_ns - kernel_ns)
        self.dirty = True

    def _reconcile(self, now: float) -> None:
        """The ring can drop an event (its producers give up on a contended lock): an XON lost
        would hold its senders for good. A queue whose phase (kept by the programs) has moved past
        what the events told is released up to it (mostly an XON still on its way: harmless)."""
        for queue_id in [q for q, paused in self.paused_by_queue.items() if paused]:
            phase = self.queues.read(queue_id)[1]
            ended = phase if phase % 2 == 0 else phase - 1
            if ended > self.released_phase[queue_id]:
                self.phases_ended_early += 1
                self._end_phase(queue_id, ended, now)

    def _end_phase(self, queue_id: int, phase: int, now: float) -> None:
        """Release the upstream ports paused in this phase or before (a later phase may already hold
        some of them again: its XOFF can overtake this XON on the ring)."""
        self.released_phase[queue_id] = max(self.released_phase[queue_id], phase)
        paused = self.paused_by_queue[queue_id]
        for upstream in [p for p, at in paused.items() if at <= phase]:
            del paused[upstream]
            self._release(upstream, self.queue_reasons[queue_id], now)

    # --- faults --------------------------------------------------------------------------------------
    def handle(self, request: dict) -> dict:
        op = request.get("op")
        now = time.monotonic()
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "publish":  # for a reader that must see everything counted until now (client.port_counters_now)
            self.publish(now)
            return {"ok": True, "t_mono": round(now, 4)}
        if op == "hold":
            fault = request["id"]
            if fault in self.holds:
                return {"ok": False, "error": f"fault {fault} already holds ports"}
            hold = Hold([Port(*p) for p in request["ports"]], request.get("pause_ms"), request.get("period_ms"),
                        started=now, next_change=now)
            self.holds[fault] = hold
            self._step_hold(fault, hold, now)
            return {"ok": True}
        if op == "tune":
            return self._tune(request)
        if op == "release":
            return {"ok": True, "report": self._release_fault(request["id"], now)}
        if op == "marking":  # every switch queue's ECN marking now: kmin, kmax (bytes), pmax (config-audit)
            return {"ok": True, "ports": {f"{q.port.node} {q.port.ifname}": list(self.queues.marking(q.id))
                                          for q in self.queues.queues}}
        if op == "thresholds":  # every switch queue's XOFF and XON now, bytes (config-audit: 0 is lossy)
            return {"ok": True, "ports": {f"{q.port.node} {q.port.ifname}": list(self.queues.thresholds(q.id))
                                          for q in self.queues.queues}}
        if op == "status":  # why each held port is held (queue ids and their XOFF phase, fault ids)
            return {"ok": True, "held": {str(p): sorted(r) for p, r in self.reasons.items() if r},
                    "queues": {str(self.queues.queues[q].port): {"phase": self.queues.read(q)[1],
                                                               "released": self.released_phase[q],
                                                               "holds": {str(u): at for u, at in paused.items()}}
                               for q, paused in self.paused_by_queue.items() if paused}}
        return {"ok": False, "error": f"unknown request {op!r}"}

    def _step_hold(self, fault: str, hold: Hold, now: float) -> None:
        if now < hold.next_change:
            return
        reason = f"f:{fault}"
        if not hold.paused:
            for port in hold.ports:
                self._hold(port, reason, now)
            hold.paused, hold.since, hold.pauses = True, now, hold.pauses + 1
            hold.next_change = float("inf") if hold.pause_ms is None else now + hold.pause_ms / 1000
        else:
            for port in hold.ports:
                self._release(port, reason, now)
            hold.paused = False
            hold.paused_s += now - hold.since
            hold.next_change = float("inf") if hold.period_ms is None else \
                hold.started + hold.pauses * hold.period_ms / 1000

    def _tune(self, request: dict) -> dict:
        port = Port(*request["port"])
        queue_ = self.queues.by_port.get(port)
        tuning = Tuning(queue_.id if queue_ else None, port, None, self.watchdog_ms.get(port))
        if queue_ is not None and ("xoff" in request or "xon" in request):
            before = self.queues.thresholds(queue_.id)
            tuning.thresholds = before
            self._set_thresholds(queue_.id, request.get("xoff", before[0]), request.get("xon", before[1]))
        if queue_ is not None and any(k in request for k in ("kmin", "kmax", "pmax")):
            before = self.queues.marking(queue_.id)
            tuning.marking = before
            self.queues.set_marking(queue_.id, request.get("kmin", before[0]), request.get("kmax", before[1]),
                                    request.get("pmax", before[2]))
        if request.get("watchdog_ms"):
            self.watchdog_ms[port] = request["watchdog_ms"]
        self.tunings.setdefault(request["id"], []).append(tuning)
        return {"ok": True}

    def _set_thresholds(self, queue_id: int, xoff: int, xon: int) -> None:
        """A queue's XOFF and XON, and its qdisc's limit to match: a lossy queue (XOFF 0, a fault's
        lossy class) drops at its buffer, a lossless one holds the late allowance above it."""
        queue_ = self.queues.queues[queue_id]
        limit = switch_queue_limit(self.fabric, queue_.port, queue_.thresholds.buffer, lossless=xoff != 0)
        self.queues.set_thresholds(queue_id, xoff, xon)
        if limit != self.gates.limit(queue_.port):
            closed = bool(self.reasons.get(queue_.port)) and queue_.port not in self.dropping
            self.gates.set_limit(queue_.port, limit, closed)

    def _release_fault(self, fault: str, now: float) -> dict:
        report: dict = {}
        hold = self.holds.pop(fault, None)
        if hold is not None:
            if hold.paused:
                for port in hold.ports:
                    self._release(port, f"f:{fault}", now)
                hold.paused_s += now - hold.since
            report.update(pauses=hold.pauses, paused_s=round(hold.paused_s, 3), most_held=hold.most_held,
                          watchdog_s=None if hold.watchdog_s is None else round(hold.watchdog_s, 3))
        for tuning in reversed(self.tunings.pop(fault, [])):
            if tuning.thresholds is not None and tuning.queue_id is not None:
                self._set_thresholds(tuning.queue_id, *tuning.thresholds)
            if tuning.marking is not None and tuning.queue_id is not None:
                self.queues.set_marking(tuning.queue_id, *tuning.marking)
            if tuning.watchdog_ms is None:
                self.watchdog_ms.pop(tuning.port, None)
            else:
                self.watchdog_ms[tuning.port] = tuning.watchdog_ms
        return report

    # --- the watchdog ------------------------------------------------------------------------------
    def _watchdogs(self, now: float) -> None:
        for port, since in list(self.paused_since.items()):
            limit_ms = self.watchdog_ms.get(port, self.fabric.pfc_watchdog_ms)
            if limit_ms and now - since >= limit_ms / 1000:
                self._enter_drop_mode(port, now)

    def _enter_drop_mode(self, port: Port, now: float) -> None:
        """Stop honouring the pause (gate open) and drop what the port sends (an nft rule)."""
        table = watchdog_table(port)
        self.dropping[port] = table
        for hold in self.holds.values():
            if port in hold.ports and hold.watchdog_s is None:
                hold.watchdog_s = now - hold.started
        counter = self.counters[port]
        counter.watchdog += 1
        counter.paused_s += now - self.paused_since.pop(port, now)  # no longer held: it drops instead
        counter.paused = False
        self.gates.open(port)
        chain, commands = nft.device_chain(table, port.ifname, "egress")
        self._nft(port.node, commands + [nft.rule(table, chain, [{"counter": None}, {"drop": None}])])
        self.dirty = True

    def _leave_drop_mode(self, port: Port) -> None:
        table = self.dropping.pop(port)
        self._nft(port.node, [{"delete": {"table": {"family": "netdev", "name": table}}}])
        self.gates.open(port)

    def _nft(self, node: str, commands: list[dict]) -> None:
        """Run nft in the node's namespace without waiting for it (children are reaped each turn)."""
        child = subprocess.Popen(["nsenter", f"--net={self.runtime.netns_path(node)}", "nft", "-j", "-f", "-"],
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        child.stdin.write(json.dumps({"nftables": commands}).encode())
        child.stdin.close()
        self.children.append(child)

    def _reap(self) -> None:
        for child in [c for c in self.children if c.poll() is not None]:
            self.children.remove(child)
            if child.returncode:
                self.errors.append(f"nft failed: {child.stderr.read().decode(errors='replace').strip()}")
            child.stderr.close()

    # --- counts the kernel dropped behind the programs' backs --------------------------------------
    def _schedule_checks(self) -> None:
        """Queues above XOFF, counts that did not move and counts below zero are compared with their
        qdisc (one node per turn)."""
        by_node: dict[str, list[int]] = defaultdict(list)
        for queue_ in self.queues.queues:
            occ, phase, _peak = self.queues.read(queue_.id)
            if phase & 1 or occ < 0 or (occ != 0 and self.last_seen.get(queue_.id) == occ):
                by_node[queue_.port.node].append(queue_.id)
            self.last_seen[queue_.id] = occ
        self.check_queues = dict(by_node)
        self.pending_checks = deque(by_node)

    def _check_node(self, node: str, now: float) -> None:
        """A count off the backlog by two frames or more, the same way at two checks in a row,
        carries drops the programs never saw (a link that went down, an overflow) or a correction
        of in-flight bytes to undo: the smaller difference is taken off (packets on the wire make
        it vary; a lost packet's bytes stay)."""
        counted = {q: self.queues.read(q)[0] for q in self.check_queues.get(node, [])}
        try:
            backlogs = self.readers[node].read()
        except OSError as error:  # an error reply to the dump: no backlog to compare, check again next turn
            self.errors.append(f"{node}: qdisc dump failed ({error}): its check skipped")
            return
        index = self.indexes[node]
        for queue_id, count in counted.items():
            backlog = backlogs.get(index[self.queues.queues[queue_id].port.ifname], (0, 0))[0]
            excess, before = count - backlog, self.excess.get(queue_id, 0)
            self.excess[queue_id] = excess
            drift = min(excess, before) if excess > 0 and before > 0 else max(excess, before) \
                if excess < 0 and before < 0 else 0
            if abs(drift) < 2 * self.frame:
                continue
            self.excess.pop(queue_id)
            ended = self.queues.discount(queue_id, drift)
            if ended:
                self._end_phase(queue_id, ended, now)
            self.corrections += 1
            self.errors.append(f"queue {self.queues.queues[queue_id].port}: count off its backlog ({backlog}) "
                               f"by {drift} bytes at two checks: corrected")

    # --- publishing ----------------------------------------------------------------------------------
    def publish(self, now: float) -> None:
        started = time.monotonic()
        rows = {}
        for port, counter in self.counters.items():
            queue_ = self.queues.by_port.get(port)
            if queue_ is not None:
                occ, phase, peak = self.queues.read(queue_.id)
                counter.queue, counter.queue_peak = max(0, occ), max(counter.queue_peak, peak)
                counter.xoff = published.pausing(phase, bool(self.paused_by_queue.get(queue_.id)))
                counter.xoff_times = (phase + 1) // 2
                counter.ecn_marked = self.queues.marked(queue_.id)
                counter.steered_in, counter.steered_away = self.queues.steered(queue_.id)
                counter.late = self.queues.late(queue_.id)
            since = self.paused_since.get(port)
            held_for = now - since if since is not None else 0.0
            counter.paused_for_s = round(held_for, 4)
            rows[port] = (counter, round(counter.paused_s + held_for, 4))
        usage = os.times()
        self.publisher.submit(published.encode(now, rows, {
            "pid": os.getpid(), "cpu_s": round(usage.user + usage.system, 3),
            "reaction": self.reactions.summary(), "ring_wakeup": self.wakeups.summary(),
            "longest_turn_ms": round(self.longest_turn_s * 1000, 2), "loop_busy_s": round(self.busy_s, 3),
            "publish_ms": round(self.publish_s * 1000, 2), "gate_messages": self.gates.sent,
            "count_corrections": self.corrections, "lost_events": self.queues.lost_events(),
            "phases_ended_before_their_xon": self.phases_ended_early,
            # packets held above their queue's buffer because a pause came late (buffers.py)
            "late_packets": sum(counter.late for counter, _ in rows.values()),
            "errors": (self.errors + self.gates.errors() + self.publisher.errors)[-20:]}))
        self.publish_s = time.monotonic() - started
        self.dirty = bool(self.paused_since)  # paused times grow while ports are held
        if self.counts_quietly:
            self.marks_published = self.queues.total_counted()

    # --- the loop -----------------------------------------------------------------------------------
    def run(self) -> None:
        path = published.directory(self.lab_dir) / SOCKET
        path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server.bind(str(path))
        server.listen(16)
        poller = select.epoll()
        poller.register(self.queues.events_fd, select.EPOLLIN)
        poller.register(server.fileno(), select.EPOLLIN)
        clients: dict[int, socket.socket] = {}
        self.publisher = publisher.Publisher(published.path(self.lab_dir), "the counters")
        next_flush = next_check = next_reconcile = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            timed = bool(self.paused_since) or any(h.next_change != float("inf") for h in self.holds.values())
            deadline = min(next_flush if self.dirty or self.counts_quietly else now + RESYNC_S, next_check,
                           now if self.pending_checks else float("inf"), now + TICK_S if timed else float("inf"))
            ready = poller.poll(max(0.0, deadline - now))
            awake = time.monotonic()
            for fd, _mask in ready:
                if fd == self.queues.events_fd:
                    self.on_events()
                elif fd == server.fileno():
                    client, _ = server.accept()
                    clients[client.fileno()] = client
                    poller.register(client.fileno(), select.EPOLLIN)
                else:
                    self._serve(poller, clients, fd)
            now = time.monotonic()
            if self.holds:
                held = sum(1 for reasons in self.reasons.values() if reasons)
                for fault, hold in list(self.holds.items()):
                    self._step_hold(fault, hold, now)
                    hold.most_held = max(hold.most_held, held)
            if self.paused_since:
                self._watchdogs(now)
                if now >= next_reconcile:
                    self._reconcile(now)
                    next_reconcile = now + TICK_S
            if self.children:
                self._reap()
            self.gates.flush()
            # At most one slower step per turn, so the next events never wait long. Marks and
            # moved packets count without an event: a lab that has them publishes when they moved.
            if not self.dirty and self.counts_quietly and now >= next_flush:
                self.dirty = self.queues.total_counted() != self.marks_published
                if not self.dirty:
                    next_flush = now + FLUSH_S
            if self.dirty and now >= next_flush:
                self.publish(now)
                next_flush = now + FLUSH_S
            elif self.pending_checks:
                self._check_node(self.pending_checks.popleft(), now)
            elif now >= next_check:
                if not (self.lab_dir / "state.json").exists():
                    # The lab went without us (its state removed, then `twin cleanup` by labels):
                    # nothing is left to control, and nothing would end us.
                    self.orphaned = self.stopping = True
                    break
                self._schedule_checks()
                next_check = now + RESYNC_S
            turn = time.monotonic() - awake
            self.busy_s += turn
            self.longest_turn_s = max(self.longest_turn_s, turn)
        if not self.orphaned:
            self.publish(time.monotonic())

    def _serve(self, poller, clients: dict[int, socket.socket], fd: int) -> None:
        client = clients[fd]
        try:
            data = client.recv(65536)
        except OSError:
            data = b""
        if not data:
            poller.unregister(fd)
            clients.pop(fd).close()
            return
        try:
            reply = self.handle(json.loads(data))
        except Exception as exc:  # a bad request must not take the lab's PFC down
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        self.gates.flush()
        try:
            client.send(json.dumps(reply).encode())
        except OSError:
            pass

    def shutdown(self) -> None:
        """Open every gate and remove the watchdog rules: the lab keeps forwarding without us."""
        for port in self.ports:
            self.gates.open(port)
        try:
            self.gates.flush()
        except OSError:
            pass
        for port, table in list(self.dropping.items()):
            try:
                nft.delete_table(self.runtime, port.node, "netdev", table)
            except Exception:
                pass
        for child in self.children:
            child.wait(timeout=5)
        for reader in self.readers.values():
            reader.sock.close()
        if self.publisher is not None:
            self.publisher.close()
        self.gates.shutdown()
        self.queues.close()


def main() -> None:
    lab = Lab.open(Path(sys.argv[1]).name)
    published.directory(lab.paths.root).mkdir(parents=True, exist_ok=True)
    controller = Controller(lab)
    controller.start()  # forks the kicker, which stays at normal priority
    if (refused := real_time(RT_PRIORITY)) is not None:
        controller.errors.append(f"{refused}: reactions may be slower under load")
    stop_on_signals(lambda: setattr(controller, "stopping", True))
    try:
        controller.run()
    finally:
        controller.shutdown()


if __name__ == "__main__":
    main()
