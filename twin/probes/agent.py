"""The probe agent: one process per host, in the host's namespace, probing from each of its NICs.

    python -m twin.probes.agent <config.json>

The config lives in the lab's run directory (so `twin lab down` recognises the process).
For every (src NIC, dst NIC, source port) the agent
- learns the path: UDP probes with TTL 2..hops from the same 5-tuple make each switch on
  the way answer ICMP time-exceeded, which the kernel queues on the sending socket
  (IP_RECVERR); the offender is the switch's ingress address, so each answer names a link.
  Done at start, and at once on SIGUSR1 (the runner sends it when routes change); every
  `refresh_s` too, where a cover selection limits it to the probed flows' own ports (any
  found moved: all again);
- keeps one source port per distinct path and sends a probe on it every `interval_ms`,
  spread evenly over the interval, each time from the next of the source ports discovery found
  on exactly that path (its siblings): a fault that drops only some 5-tuples (a broken ECMP
  member, a hash-selected defect) then shows on the path as partial loss, where one fixed
  5-tuple per path either lost everything or nothing. Probes carry the path's own port, so
  receivers and the mesh count them as one flow; or, when the config names a `select` file (pairs: cover),
  probes only the flows listed there, which the mesh writes from every agent's paths and
  announces with SIGUSR2 (nothing is probed before the first selection; a row is
  [src, dst, sport, every, times]: a flow testing a route is probed in one interval of `every`,
  a flow the mesh focuses on after a loss `times` times an interval, evenly); the receiving agent
  counts it (one-way, the machine has one clock) and echoes it back (round trip): every probe,
  or one in `rtt_every` (an echo is a second packet across the fabric, and at pod128 the
  fabric's forwarding of the probes was most of the mesh's CPU; the one-way delay and the loss
  need no echo).
It writes JSON lines per reporting bucket: what it sent, received and the RTTs of echoes (the
fabric's: from the kernel's receive times, less the time the echoing agent held the probe); and,
when the config says `watch_echoes` (the mesh focuses after a loss: probes/focus.py), the flows of
echoed probes whose echo has not come back within ECHO_WAIT_S (`miss`), at once: a bucket's loss is
counted only after its end and the grace, half a second or more after the probe went missing.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import socket
import struct
import sys
import time
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import NamedTuple

from twin.probes.trace import agrees_where_answered
from twin.procs import INSTRUMENT_NICE, set_priority
from twin.sockopts import (
    ARRIVAL_SPACE,
    DEFAULT_TTL,
    ICMP_DEST_UNREACH,
    ICMP_TIME_EXCEEDED,
    arrival_time,
    icmp_errors,
    report_errors,
    send,
    send_from_port,
    stamp_arrivals,
)

MAGIC = b"FTWp"
PROBE, ECHO, TRACE = 1, 2, 3
HEADER = struct.Struct("!4sBBHHHId")  # magic, type, ttl, src, dst, sport, seq, send time
# In an echo, after the header: how long the echoing agent held the probe, from the kernel's receive
# time to its echo's send (TWAMP's T3 - T2), which the sender takes off the round trip: an RTT is then
# the fabric's, not the two agents' waits for a CPU (on a loaded 2-core machine, several ms each).
HELD = struct.Struct("!d")
PAYLOAD = 64
TRACE_ROUNDS = 3  # unanswered TTL probes are resent this many times
TRACE_PPS = 1000  # discovery pace per agent: thousands of TTL probes in one burst would crowd
#                   the queues of links a collective saturates
TRACE_BATCH = 5  # trace probes per turn, one turn per TICK_S
TICK_S = 0.005  # probes are sent in batches due within this long; receive times stay exact
FLUSH_EVERY_S = 0.05
MAX_WAIT_S = 0.1  # the longest poll: a signal's request (rediscover, selection, stop) waits at most this
ECHO_WAIT_S = 0.2  # an echo this late is missed (round trips under a busy allreduce: p99 27 ms, the
#                    slowest one-way delay seen 126 ms); a late one costs a focus, never a loss

refresh_requested = False
selection_changed = False
stopping = False


def _on_usr1(*_args) -> None:
    global refresh_requested
    refresh_requested = True


def _on_usr2(*_args) -> None:
    global selection_changed
    selection_changed = True


def _on_term(*_args) -> None:
    global stopping
    stopping = True


class Slot(NamedTuple):
    """One place in the agent's round of probes."""
    sockets: list  # the flow's own socket, then its siblings'
    address: str
    src: int
    dst: int
    sport: int
    every: int = 1  # probed in one interval of this many (a flow testing a route: selection.route_every)
    times: int = 1  # probed this many times an interval (a flow the mesh focuses on: probes/focus.py)
    copy: int = 0  # which of those times this slot is


def spread(flows: list[Slot]) -> list[Slot]:
    """The round: a flow's `times` slots at phases 1/times apart among the others' (slots are due one
    after another, evenly over the interval, so its probes fall about evenly over it too)."""
    count = len(flows)
    placed = [((i / count + copy / flow.times) % 1, i, copy, flow._replace(copy=copy))
              for i, flow in enumerate(flows) for copy in range(flow.times)]
    return [slot for *_order, slot in sorted(placed, key=lambda item: item[:3])]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Agent:
    def __init__(self, config: dict):
        self.config = config
        self.epoch = config["epoch"]
        self.interval = config["interval_ms"] / 1000
        self.report = config["report_ms"] / 1000
        self.rtt_every = config.get("rtt_every", 1)  # echo one probe in this many
        self.grace = config["grace_s"]
        self.labels = config["nics"]  # global NIC index -> label
        self.index = {label: i for i, label in enumerate(self.labels)}
        self.out = open(config["output"], "a", buffering=1)
        self.pairs = config["pairs"]  # this host's pairs: src, dst, dst_address, hops, sports
        self.receivers: dict[socket.socket, dict] = {}
        self.senders: dict[tuple[str, int], socket.socket] = {}  # (src label, sport) -> socket
        self.by_fd: dict[int, tuple[str, socket.socket]] = {}
        self.sent = defaultdict(lambda: defaultdict(int))
        self.received = defaultdict(lambda: defaultdict(list))
        self.rtts = defaultdict(lambda: defaultdict(list))
        self.seq = 0
        self.marked = -1  # the last bucket whose rows are all written
        self.longest_gap = 0.0  # the longest wait between two turns of the loop since the last mark
        self.sent_total = 0
        # seq -> (src, dst, sport, sent at) of echoed probes not yet answered, oldest first
        self.awaiting: OrderedDict[int, tuple[int, int, int, float]] | None = \
            OrderedDict() if config.get("watch_echoes") else None
        self.active: list[Slot] = []
        self.siblings: dict[tuple[str, str, int], list[int]] = {}  # (src, dst label, sport) -> ports on its path
        self.cursor, self.base = 0, time.monotonic()
        self.trace_queue: list[tuple] = []
        self.trace_answers: dict[tuple[int, int, int], dict[int, str]] = {}
        self.unroutable: set[tuple[int, int, int]] = set()  # traced ports a switch answered "no route" for
        self.tracing: set[tuple[int, int, int]] | None = None  # a periodic check's ports (None: every one)
        self.published: dict[tuple[int, int, int], list] = {}  # each port's hops as last published
        self.trace_round = 0
        self.trace_deadline: float | None = None
        self.next_refresh = 0.0
        # epoll, not poll: a cover agent holds a socket per candidate source port (1,300 at
        # pod128), and poll walked all of them on every 10 ms tick: 5 % of a core per idle agent.
        self.poller = select.epoll()
        # pairs: cover: (src label, dst label) -> the source ports the mesh selected, each with its
        # pace (every, times); None before the first selection, and always None without a select
        # file (every distinct path probed, once every interval)
        self.selected: dict[tuple[str, str], dict[int, tuple[int, int]]] | None = None

    def emit(self, **record) -> None:
        self.out.write(json.dumps(record) + "\n")

    def open_sockets(self) -> None:
        listening = set()
        for nic in self.config["local_nics"]:
            if nic["address"] in listening:  # the other port of a dual-port NIC: one socket takes both
                continue
            listening.add(nic["address"])
            sock = self._socket(nic, self.config["port"], receiver=True)
            self.receivers[sock] = nic
            self._watch(sock, "rx")
        for pair in self.pairs:
            nic = next(n for n in self.config["local_nics"] if n["label"] == pair["src"])
            for sport in pair["sports"]:
                if (pair["src"], sport) not in self.senders:
                    sock = self._socket(nic, sport)
                    report_errors(sock)
                    self.senders[(pair["src"], sport)] = sock
                    self._watch(sock, "tx")

    def _socket(self, nic: dict, port: int, receiver: bool = False) -> socket.socket:
        """A socket of the NIC's port. A port of a dual-port NIC (`shared`: its address is on both)
        is not bound to its device, which would also drop what arrives on the other port (a probe to
        the NIC, an echo or a trace's answer the fabric hashed there); it sends from its port by
        IP_UNICAST_IF, and one receiver takes the NIC's probes from both."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if not nic.get("shared"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, nic["ifname"].encode())
        elif not receiver:
            send_from_port(sock, nic["ifname"])
            # The NIC's other port may send from the same source port (the plan draws each pair's
            # apart): both bind the address. What comes back to either (an echo, a trace's answer)
            # names its flow in the quoted payload, and both sockets are read.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        stamp_arrivals(sock)
        sock.bind((nic["address"], port))
        sock.setblocking(False)
        return sock

    def _watch(self, sock: socket.socket, role: str) -> None:
        self.by_fd[sock.fileno()] = (role, sock)
        self.poller.register(sock, select.EPOLLIN | select.EPOLLERR)

    # --- path discovery -------------------------------------------------------------------
    def start_discovery(self, full: bool = True) -> None:
        """Trace every candidate port (at start, when routes changed), or, for a periodic refresh
        of a cover agent, only the probed flows' own ports: a pod128 agent holds 1,300
        candidates, about ten on each probed path, and tracing them all every refresh_s was
        170,000 TTL probes for the fabric to answer each time, and a new selection. Without a
        route change a hash does not move a flow; this checks that. A traced port found on
        another path starts a full discovery."""
        self.tracing = None if full or self.selected is None else self._probed_ports()
        self.trace_answers = {} if self.tracing is None else \
            {key: answers for key, answers in self.trace_answers.items() if key not in self.tracing}
        self.unroutable = set() if self.tracing is None else self.unroutable - self.tracing
        self.trace_round = 0
        self._queue_traces()
        self.next_refresh = time.monotonic() + self.config["refresh_s"]

    def _probed_ports(self) -> set[tuple[int, int, int]]:
        return {(slot.src, slot.dst, slot.sport) for slot in self.active}

    def _traced(self, src: int, dst: int, sport: int) -> bool:
        return self.tracing is None or (src, dst, sport) in self.tracing

    def _queue_traces(self) -> None:
        self.trace_queue = []
        for pair in self.pairs:
            src, dst = self.index[pair["src"]], self.index[pair["dst"]]
            for sport in pair["sports"]:
                if not self._traced(src, dst, sport):
                    continue
                answers = self.trace_answers.setdefault((src, dst, sport), {})
                for ttl in range(2, pair["hops"] + 1):
                    if ttl not in answers:
                        self.trace_queue.append((pair, src, dst, sport, ttl))
        # Nothing to trace (every pair of this agent is under one leaf: no TTL answers): the
        # round is over at once, and its paths are published.
        self.trace_deadline = None if self.trace_queue else time.monotonic()

    def _send_traces(self, now: float) -> None:
        batch, self.trace_queue = self.trace_queue[:TRACE_BATCH], self.trace_queue[TRACE_BATCH:]
        for pair, src, dst, sport, ttl in batch:
            self._send(self.senders[(pair["src"], sport)], pair["dst_address"], TRACE, ttl, src, dst, sport, now)
        if not self.trace_queue:
            self.trace_deadline = now + 0.3  # answers come within a few ms; then check gaps

    def _finish_discovery_round(self) -> None:
        self.trace_round += 1
        missing = any(len(self.trace_answers.get((self.index[pair["src"]], self.index[pair["dst"]], sport), {}))
                      < pair["hops"] - 1 for pair in self.pairs for sport in pair["sports"]
                      if self._traced(self.index[pair["src"]], self.index[pair["dst"]], sport))
        if missing and self.trace_round < TRACE_ROUNDS:
            self._queue_traces()
            return
        self.trace_deadline = None
        if self.tracing is not None:  # a periodic check of the probed flows
            moved = any(self._hops(key, pair) != self.published.get(key) for pair in self.pairs
                        for key in ((self.index[pair["src"]], self.index[pair["dst"]],
                                     sport) for sport in pair["sports"])
                        if key in self.tracing)
            if moved:
                self.start_discovery()
            return
        self._publish_paths()

    def _hops(self, key: tuple[int, int, int], pair: dict) -> list:
        answers = self.trace_answers.get(key, {})
        return [answers.get(ttl) for ttl in range(2, pair["hops"] + 1)]

    def _publish_paths(self) -> None:
        active = []
        for pair in self.pairs:
            src, dst = self.index[pair["src"]], self.index[pair["dst"]]
            sock_paths: dict[int, list] = {}
            for sport in pair["sports"]:
                sock_paths[sport] = self.published[(src, dst, sport)] = self._hops((src, dst, sport), pair)
            chosen: dict[tuple, int] = {}
            for sport, hops in sock_paths.items():
                chosen.setdefault(tuple(hops), sport)
            self._find_siblings(pair, sock_paths)
            ports = dict.fromkeys(sorted(chosen.values()), (1, 1)) if not self.config.get("select") else \
                (self.selected or {}).get((pair["src"], pair["dst"]), {})
            active += [Slot(self._sockets(pair["src"], pair["dst"], sport), pair["dst_address"], src, dst,
                            sport, *pace) for sport, pace in sorted(ports.items())]
            self.emit(type="paths", t=time.monotonic(), src=pair["src"], dst=pair["dst"],
                      paths={str(sport): hops for sport, hops in sock_paths.items()}, active=sorted(ports),
                      unroutable=[sport for sport in pair["sports"] if (src, dst, sport) in self.unroutable])
        self._take_round(spread(active))

    def _take_round(self, active: list[Slot]) -> None:
        """Probe these slots from now on, in the round's current phase: a new round at once would
        probe again every flow already probed in this one (the mesh changes a focus every few
        hundred milliseconds while loss lasts)."""
        now = time.monotonic()
        elapsed = (now - self.base) % self.interval if self.active else 0.0
        self.active, self.base = active, now - elapsed
        self.cursor = math.ceil(elapsed / self.interval * len(active))

    def _find_siblings(self, pair: dict, sock_paths: dict[int, list]) -> None:
        """Ports whose discovery crossed the same switches are siblings. A port that now has a hop
        that did not answer stays with the siblings it had when every hop answered, unless a hop
        that did answer says otherwise: a fault that drops some 5-tuples drops their TTL probes
        too, and the very ports it drops must stay in the rotation for their loss to be seen."""
        key = lambda sport: (pair["src"], pair["dst"], sport)  # noqa: E731
        before = {sport: set(self.siblings.pop(key(sport), [])) for sport in pair["sports"]}
        same_path: dict[tuple, list[int]] = defaultdict(list)
        for sport, hops in sock_paths.items():
            if None not in hops:
                same_path[tuple(hops)].append(sport)
        for sport, hops in sock_paths.items():
            if None in hops:
                for path, ports in same_path.items():
                    if agrees_where_answered(hops, path) and any(sport in before[port] for port in ports):
                        ports.append(sport)
                        break
        for ports in same_path.values():
            for sport in ports:
                self.siblings[key(sport)] = [sport] + [p for p in ports if p != sport]

    def load_selection(self) -> None:
        """Probe the flows the mesh selected (its file is replaced whole, never written in place)."""
        try:
            flows = json.loads(Path(self.config["select"]).read_text())
        except (OSError, ValueError):
            return  # not written yet: the mesh signals again when it is
        selected: dict[tuple[str, str], dict[int, tuple[int, int]]] = defaultdict(dict)
        for src, dst, sport, *pace in flows:  # [src, dst, sport], [.., every] or [.., every, times]
            if (src, sport) in self.senders:
                every, times = (list(pace) + [1, 1])[:2]
                selected[(src, dst)][sport] = (max(1, int(every)), max(1, int(times)))
        self.selected = dict(selected)
        addresses = {(p["src"], p["dst"]): p["dst_address"] for p in self.pairs}
        self._take_round(spread([Slot(self._sockets(src, dst, sport), addresses[(src, dst)], self.index[src],
                                      self.index[dst], sport, *pace)
                                 for (src, dst), ports in sorted(self.selected.items())
                                 for sport, pace in sorted(ports.items()) if (src, dst) in addresses]))
        self.emit(type="selected", t=time.monotonic(), flows=len(self._probed_ports()), slots=len(self.active))

    def _sockets(self, src: str, dst: str, sport: int) -> list[socket.socket]:
        """The flow's own socket, then those of its siblings (found on its path at the last discovery)."""
        return [self.senders[(src, port)] for port in self.siblings.get((src, dst, sport), [sport])]

    # --- probing --------------------------------------------------------------------------
    def _send(self, sock, address, kind, ttl, src, dst, sport, now) -> None:
        self.seq += 1
        payload = HEADER.pack(MAGIC, kind, ttl, src, dst, sport, self.seq & 0xFFFFFFFF, now).ljust(PAYLOAD, b"\0")
        # A send that fails twice (no route) still counts as sent, and so as lost.
        send(sock, payload, (address, self.config["port"]), ttl)

    def _send_due(self, now: float) -> float:
        """Send what is due; returns when the next probe is due."""
        count = len(self.active)
        if not count:
            return now + 0.01
        while True:
            due = self.base + (self.cursor // count) * self.interval + (self.cursor % count) * self.interval / count
            if due > now:
                return due
            if now - due > self.interval:  # fell behind by a whole interval: skip, do not burst
                self.cursor += count
                continue
            slot, round_number = self.cursor % count, self.cursor // count
            flow = self.active[slot]
            if (round_number + slot) % flow.every:  # not its round: its slot stays empty (staggered by slot)
                self.cursor += 1
                continue
            turn = (round_number // flow.every) * flow.times + flow.copy
            sock = flow.sockets[turn % len(flow.sockets)]  # the next sibling each time
            self._send(sock, flow.address, PROBE, DEFAULT_TTL, flow.src, flow.dst, flow.sport, now)
            if self.awaiting is not None and not (self.seq & 0xFFFFFFFF) % self.rtt_every:
                self.awaiting[self.seq & 0xFFFFFFFF] = (flow.src, flow.dst, flow.sport, now)
            self.sent[self._bucket(now)][(flow.src, flow.dst, flow.sport)] += 1
            self.sent_total += 1
            self.cursor += 1

    def _bucket(self, sent_at: float) -> int:
        return int((sent_at - self.epoch) / self.report)

    def _read(self, role: str, sock: socket.socket, now: float) -> None:
        """Read what arrived; delays count from the kernel's receive time (stamp_arrivals), not
        from `now`, when this process got to it."""
        if role == "tx":
            self._read_errors(sock)
        monotonic_from_real = time.monotonic() - time.time()  # read together: the kernel stamps real time
        while True:
            try:
                data, ancillary, _flags, peer = sock.recvmsg(512, ARRIVAL_SPACE)
            except (BlockingIOError, ConnectionRefusedError):
                return
            except OSError:
                return
            if len(data) < HEADER.size or data[:4] != MAGIC:
                continue
            stamped = arrival_time(ancillary)
            arrived = now if stamped is None else stamped + monotonic_from_real
            _m, kind, _ttl, src, dst, sport, seq, sent_at = HEADER.unpack_from(data)
            if role == "rx" and kind == PROBE:
                self.received[self._bucket(sent_at)][(src, dst, sport)].append(arrived - sent_at)
                if seq % self.rtt_every:
                    continue
                echo = bytearray(data.ljust(HEADER.size + HELD.size, b"\0"))
                echo[4] = ECHO
                HELD.pack_into(echo, HEADER.size, time.monotonic() - arrived)
                try:
                    sock.sendto(echo, peer)
                except OSError:
                    pass
            elif role == "tx" and kind == ECHO:
                held = HELD.unpack_from(data, HEADER.size)[0] if len(data) >= HEADER.size + HELD.size else 0.0
                self.rtts[self._bucket(sent_at)][(src, dst, sport)].append(arrived - sent_at - held)
                if self.awaiting is not None:
                    self.awaiting.pop(seq, None)

    def _report_missed(self, read_until: float) -> None:
        """Write the flows of probes whose echo is ECHO_WAIT_S late at `read_until` (everything that
        had arrived by then was read: an agent kept off the CPU does not miss what waited for it)."""
        missed = []
        while self.awaiting:
            seq, (src, dst, sport, sent_at) = next(iter(self.awaiting.items()))
            if read_until - sent_at < ECHO_WAIT_S:
                break
            self.awaiting.popitem(last=False)
            missed.append([self.labels[src], self.labels[dst], sport])
        if missed:
            self.emit(type="miss", t=round(read_until, 3), flows=missed)

    def _read_errors(self, sock: socket.socket) -> None:
        for data, offender, icmp_type in icmp_errors(sock):
            if len(data) < HEADER.size or data[:4] != MAGIC:
                continue
            _m, kind, ttl, src, dst, sport, _seq, _t = HEADER.unpack_from(data)
            if kind != TRACE:
                continue
            if icmp_type == ICMP_TIME_EXCEEDED:
                self.trace_answers.setdefault((src, dst, sport), {})[ttl] = offender
            elif icmp_type == ICMP_DEST_UNREACH:
                self.unroutable.add((src, dst, sport))

    def _flush(self, now: float, read_until: float) -> None:
        """Write the buckets that are final: sent ones once past, received ones (and the mark) once
        their grace has passed before `read_until`, the last moment everything that had arrived
        was read (an agent kept off the CPU between its read and this write once marked buckets
        done while their probes sat unread in its sockets: counted lost, on a healthy fabric)."""
        for table, kind, delay, upto in ((self.sent, "sent", 0.05, now),
                                         (self.received, "recv", self.grace, read_until),
                                         (self.rtts, "rtt", self.grace, read_until)):
            for bucket in sorted(table):
                if upto < self.epoch + (bucket + 1) * self.report + delay:
                    break
                rows = table.pop(bucket)
                if kind == "sent":
                    out = [[self.labels[s], self.labels[d], p, n] for (s, d, p), n in rows.items()]
                else:
                    out = [[self.labels[s], self.labels[d], p, len(v), round(_percentile(v, 0.5) * 1000, 3),
                            round(_percentile(v, 0.99) * 1000, 3), round(max(v) * 1000, 3)]
                           for (s, d, p), v in rows.items()]
                self.emit(type=kind, b=bucket, rows=out)
        # Every bucket up to `done` has had its grace: the mesh may count it once every agent says so
        # (a time rule on the mesh's side counted rows as lost that a busy agent wrote late).
        done = int((read_until - self.grace - self.epoch) / self.report) - 1 if read_until != float("inf") \
            else self._last_bucket()
        if done > self.marked:
            self.marked = done
            # The gap says how long this agent was kept off the CPU: a starved agent reads late.
            self.emit(type="mark", b=done, t=round(now, 3) if now != float("inf") else None,
                      gap_ms=round(self.longest_gap * 1000, 1))
            self.longest_gap = 0.0

    def _last_bucket(self) -> int:
        buckets = [b for table in (self.sent, self.received, self.rtts) for b in table]
        return max([self.marked, self._bucket(time.monotonic()), *buckets])

    def run(self) -> None:
        global refresh_requested, selection_changed
        self.open_sockets()
        self.start_discovery()
        self.emit(type="start", t=time.monotonic(), pid=os.getpid(), senders=len(self.senders))
        stopped_at, next_flush, next_trace = None, 0.0, 0.0
        last_turn = time.monotonic()
        while True:
            now = time.monotonic()
            self.longest_gap, last_turn = max(self.longest_gap, now - last_turn), now
            if stopping and stopped_at is None:
                stopped_at, self.active, self.trace_queue = now, [], []  # stop sending, keep answering
            if stopped_at is not None and now - stopped_at > self.grace:
                break
            if stopped_at is None and selection_changed:
                selection_changed = False
                self.load_selection()
            if stopped_at is None and (refresh_requested or now >= self.next_refresh):
                self.start_discovery(full=refresh_requested)
                refresh_requested = False
            if self.trace_queue:
                if now >= next_trace:
                    self._send_traces(now)
                    next_trace = now + TRACE_BATCH / TRACE_PPS
            elif self.trace_deadline is not None and now >= self.trace_deadline:
                self._finish_discovery_round()
            next_due = self._send_due(now)
            # Wake at most every TICK_S: probes due within a tick go out together, and one
            # wake-up reads everything that arrived, which halves the agent's CPU at 2000/s. Else
            # sleep until the next thing due (what arrives wakes the poll): 32 pod128 agents
            # woken every 10 ms whatever their load were 6,400 wake-ups a second.
            due = [next_due, next_flush]
            if self.trace_queue:
                due.append(next_trace)
            elif self.trace_deadline is not None:
                due.append(self.trace_deadline)
            wait_s = max(TICK_S, min(MAX_WAIT_S, min(due) - time.monotonic()))
            # Everything that arrived before the poll is read below; what arrives after may wait
            # unread while this process is off the CPU, so a bucket is final only up to here.
            read_until = time.monotonic()
            for fd, _event in self.poller.poll(wait_s):
                role, sock = self.by_fd[fd]
                self._read(role, sock, time.monotonic())
            if self.awaiting and stopped_at is None:
                self._report_missed(read_until)
            now = time.monotonic()
            if now >= next_flush:
                self._flush(now, read_until)
                next_flush = now + FLUSH_EVERY_S
        self._flush(float("inf"), float("inf"))
        usage = os.times()
        self.emit(type="stop", t=time.monotonic(), sent_total=self.sent_total,
                  cpu_s=round(usage.user + usage.system, 3), user_s=round(usage.user, 3),
                  system_s=round(usage.system, 3))


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    signal.signal(signal.SIGUSR1, _on_usr1)
    signal.signal(signal.SIGUSR2, _on_usr2)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    # The agent is the instrument, not the load: on the twin's two shared cores it must not queue
    # behind the ranks of a busy collective (a real pingmesh agent has a host's CPU to spare).
    set_priority(INSTRUMENT_NICE)
    Agent(config).run()


if __name__ == "__main__":
    main()
