"""The lab's BFD data plane: one process sends and receives every switch's BFD packets and runs
their sessions' timers, as a switch ASIC does for its control plane; each switch's bfdd stays the
control plane (configuration, bgpd's registrations, `show bfd peers`) and hands it its sessions
over FRR's distributed-BFD protocol: bfdd listens (--dplaneaddr unix:<switch dir>/bfd-dp.sock) and
the data plane connects, again whenever bfdd restarts (its sessions then come again).

Why: 368 bfdd processes each wake for every packet they send or receive; one process serving
every switch does the same work for 41 us of CPU a packet against bfdd's 104 us (lab/idle.py,
measured on pod64), about half of either being the kernel forwarding the packet.

The packets are real: each switch's two UDP sockets (port 3784 in, one source port out, TTL 255,
CS6) live in its namespace, so a fault on a link (a downed port, a silent drop, a pause) reaches
BFD exactly as it reaches any packet there. Single-hop IPv4 sessions only: the lab has no others.
Run: python -m twin.lab.bfd.dataplane <lab dir>; started and ended by lab/bfd/client.py.
"""

from __future__ import annotations

import heapq
import json
import os
import resource
import select
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from twin.lab.bfd import wire
from twin.lab.bfd.paths import DPLANE_SOCKET, READY, STATS, directory
from twin.lab.bfd.session import Session
from twin.lab.handle import Lab
from twin.lab.kernel.nsutil import in_netns
from twin.procs import real_time, stop_on_signals

SINGLE_HOP_PORT = 3784
SOURCE_PORT = 49152  # RFC 5881 4: from 49152-65535, one per session or shared
TTL = 255  # RFC 5881 5: sent with 255, and a packet that arrives with less is not from the link
TOS_CS6 = 0xC0  # network control, as bfdd marks them
IP_RECVTTL = 12  # each packet's TTL comes with it, the one ancillary message asked for
RT_PRIORITY = 5  # below the PFC controller's (its reactions are shorter than any BFD timer)
STATS_EVERY_S = 2.0
# Timers fire this late at most, so that one wake-up serves every timer due within it (with jitter
# spreading 4,000 sessions' packets, one wake-up each cost more than the packets); RFC 5880's
# jitter alone moves a packet by up to a quarter of its interval.
TIMER_SLACK_S = 0.005
CONNECT_EVERY_S = 0.25  # a switch whose bfdd is not (yet, or no longer) listening is tried again


@dataclass
class Switch:
    name: str
    rx: socket.socket
    tx: socket.socket
    bfdd_path: Path
    conn: socket.socket | None = None
    inbuf: bytearray = field(default_factory=bytearray)
    sessions: dict[int, Session] = field(default_factory=dict)  # by local discriminator
    by_peer: dict[str, int] = field(default_factory=dict)  # peer address -> local discriminator


class DataPlane:
    def __init__(self, lab: Lab):
        self.lab = lab
        self.switches: dict[str, Switch] = {}
        self.by_fd: dict[int, tuple[str, Switch]] = {}
        self.poller = select.epoll()
        self.timers: list[tuple[float, int, str, int]] = []
        self.scheduled: dict[tuple[str, int], float] = {}
        self.seq = 0
        self.stopping = False
        self.rx_total = self.tx_total = self.dropped = self.state_changes = 0

    # -- setup ------------------------------------------------------------------------------------
    def open(self) -> None:
        base = directory(self.lab.paths.root)
        base.mkdir(parents=True, exist_ok=True)
        for node in self.lab.fabric.local_switches:
            with in_netns(self.lab.netns(node.name)):
                rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                rx.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)  # IP_MINTTL is TCP's only
                rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
                rx.bind(("0.0.0.0", SINGLE_HOP_PORT))
                tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                tx.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, TTL)
                tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_CS6)
                tx.bind(("0.0.0.0", SOURCE_PORT))
            for sock in (rx, tx):
                sock.setblocking(False)
            switch = Switch(node.name, rx, tx, self.lab.state.node_dir(node.name) / DPLANE_SOCKET)
            self.switches[node.name] = switch
            self._watch(rx, "rx", switch)
        (base / READY).write_text(str(os.getpid()))

    def _watch(self, sock: socket.socket, role: str, switch: Switch) -> None:
        self.by_fd[sock.fileno()] = (role, switch)
        self.poller.register(sock.fileno(), select.EPOLLIN)

    def _unwatch(self, sock: socket.socket) -> None:
        self.by_fd.pop(sock.fileno(), None)
        try:
            self.poller.unregister(sock.fileno())
        except (OSError, ValueError):
            pass

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        next_stats = next_connect = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            if now >= next_connect:
                self._connect_all()
                next_connect = now + CONNECT_EVERY_S
            timeout = max(0.0, self.timers[0][0] + TIMER_SLACK_S - now) if self.timers else 1.0
            try:
                events = self.poller.poll(min(timeout, max(0.0, min(next_stats, next_connect) - now)))
            except InterruptedError:
                continue
            for fd, _mask in events:
                role, switch = self.by_fd.get(fd, (None, None))
                if role == "rx":
                    self._receive(switch)
                elif role == "bfdd":
                    self._from_bfdd(switch)
            self._fire(time.monotonic())
            if time.monotonic() >= next_stats:
                self._publish()
                next_stats = time.monotonic() + STATS_EVERY_S

    def _schedule(self, switch: Switch, session: Session) -> None:
        when = session.next_tx if session.detect_at is None else min(session.next_tx, session.detect_at)
        key = (switch.name, session.config.lid)
        if self.scheduled.get(key, float("inf")) <= when:
            return  # an earlier wake-up is queued; it reschedules
        self.scheduled[key] = when
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, switch.name, session.config.lid))

    def _fire(self, now: float) -> None:
        while self.timers and self.timers[0][0] <= now:
            when, _seq, name, lid = heapq.heappop(self.timers)
            key = (name, lid)
            if self.scheduled.get(key) != when:
                continue  # superseded
            del self.scheduled[key]
            switch = self.switches[name]
            session = switch.sessions.get(lid)
            if session is None:
                continue
            if session.expire(now):
                self._notify(switch, session)
                self._send(switch, session, session.send_now(now))
            self._send(switch, session, session.due_packet(now))
            self._schedule(switch, session)

    def _send(self, switch: Switch, session: Session, packet: bytes | None) -> None:
        if packet is None:
            return
        try:
            switch.tx.sendto(packet, (session.config.dst, SINGLE_HOP_PORT))
            self.tx_total += 1
        except OSError:
            self.dropped += 1  # the port is down or has no route: the peer will not hear us

    def _receive(self, switch: Switch) -> None:
        """One packet: the poll reports the socket again while it holds more (reading on to
        EAGAIN cost a failed system call and an exception per packet)."""
        try:
            data, ancillary, _flags, (source, _port) = switch.rx.recvmsg(64, 64)
        except (BlockingIOError, InterruptedError):
            return
        self.rx_total += 1
        if not ancillary or int.from_bytes(ancillary[0][2], sys.byteorder) != TTL:
            return
        packet = wire.parse_control(data)
        if packet is None:
            return
        lid = packet.your_discr or switch.by_peer.get(source)
        session = switch.sessions.get(lid) if lid else None
        if session is None or session.config.dst != source:
            return
        now = time.monotonic()
        changed, answer = session.receive(packet, now)
        if changed:
            self._notify(switch, session)
        if answer:
            self._send(switch, session, session.send_now(now))
        self._schedule(switch, session)

    # -- bfdd -------------------------------------------------------------------------------------
    def _connect_all(self) -> None:
        for switch in self.switches.values():
            if switch.conn is None and switch.bfdd_path.exists():
                self._connect(switch)

    def _connect(self, switch: Switch) -> None:
        """Connect to the switch's bfdd; on accepting, it hands over every session it has."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(1.0)  # writes are a few dozen bytes to a reader that polls for them
        try:
            conn.connect(str(switch.bfdd_path))
        except OSError:  # a socket left by a bfdd that is gone, or one not listening yet
            conn.close()
            return
        switch.conn = conn
        switch.inbuf.clear()
        self._watch(conn, "bfdd", switch)

    def _drop_bfdd(self, switch: Switch) -> None:
        """bfdd went away: its sessions stop with it (the switch's control plane is gone)."""
        if switch.conn is not None:
            self._unwatch(switch.conn)
            switch.conn.close()
            switch.conn = None
        switch.sessions.clear()
        switch.by_peer.clear()

    def _from_bfdd(self, switch: Switch) -> None:
        try:
            data = switch.conn.recv(65536)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop_bfdd(switch)
            return
        switch.inbuf += data
        try:
            messages = wire.split_messages(switch.inbuf)
        except ValueError as exc:
            print(f"{switch.name}: {exc}; closing the connection", file=sys.stderr, flush=True)
            self._drop_bfdd(switch)
            return
        now = time.monotonic()
        for kind, ident, payload in messages:
            self._handle(switch, kind, ident, payload, now)

    def _handle(self, switch: Switch, kind: int, ident: int, payload: bytes, now: float) -> None:
        if kind == wire.MessageType.DP_ADD_SESSION:
            config = wire.parse_session(payload)
            session = switch.sessions.get(config.lid)
            if session is None:
                session = Session(config)
                session.next_tx = now  # the first packet at once, the rest jittered
                switch.sessions[config.lid] = session
                switch.by_peer[config.dst] = config.lid
            elif session.reconfigure(config):
                self._notify(switch, session)
                self._send(switch, session, session.send_now(now))
            self._schedule(switch, session)
        elif kind == wire.MessageType.DP_DELETE_SESSION:
            config = wire.parse_session(payload)
            if switch.sessions.pop(config.lid, None) is not None:
                switch.by_peer.pop(config.dst, None)
        elif kind == wire.MessageType.DP_REQUEST_SESSION_COUNTERS:
            (lid,) = wire.COUNTERS_REQUEST.unpack_from(payload)
            session = switch.sessions.get(lid)
            self._to_bfdd(switch, wire.counters_reply(ident, lid, session.rx_packets if session else 0,
                                                      session.tx_packets if session else 0))
        elif kind == wire.MessageType.ECHO_REQUEST:
            self._to_bfdd(switch, wire.message(wire.MessageType.ECHO_REPLY, payload, ident))

    def _notify(self, switch: Switch, session: Session) -> None:
        self.state_changes += 1
        self._to_bfdd(switch, wire.state_change(session.config.lid, session.remote, session.state))

    def _to_bfdd(self, switch: Switch, message: bytes) -> None:
        if switch.conn is None:
            return
        try:
            switch.conn.sendall(message)
        except OSError:
            self._drop_bfdd(switch)

    # -- what it did ------------------------------------------------------------------------------
    def _publish(self) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        sessions = [s for sw in self.switches.values() for s in sw.sessions.values()]
        document = {"pid": os.getpid(), "t_mono": time.monotonic(), "switches": len(self.switches),
                    "connected": sum(1 for sw in self.switches.values() if sw.conn is not None),
                    "sessions": len(sessions), "up": sum(1 for s in sessions if s.state == wire.State.UP),
                    "rx_packets": self.rx_total, "tx_packets": self.tx_total, "tx_failed": self.dropped,
                    "state_changes": self.state_changes, "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}
        path = directory(self.lab.paths.root) / STATS
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(document))
        temporary.replace(path)

    def close(self) -> None:
        for switch in self.switches.values():
            for sock in (switch.rx, switch.tx, switch.conn):
                if sock is not None:
                    sock.close()
        self.poller.close()


def main() -> None:
    lab = Lab.open(Path(sys.argv[1]).name)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 3 * len(lab.fabric.local_switches) + 64  # two UDP sockets and bfdd's connection each
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    plane = DataPlane(lab)
    plane.open()
    if (refused := real_time(RT_PRIORITY)) is not None:
        print(f"{refused}: timers may slip under load", file=sys.stderr, flush=True)
    stop_on_signals(lambda: setattr(plane, "stopping", True))
    try:
        plane.run()
    finally:
        plane.close()


if __name__ == "__main__":
    main()
