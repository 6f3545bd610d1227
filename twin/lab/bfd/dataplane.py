"""The lab's BFD data plane: one process sends and receives every switch's BFD packets and runs
their sessions' timers, as a switch ASIC does for its control plane; each switch's bfdd stays the
control plane (configuration, bgpd's registrations, `show bfd peers`) and hands it its sessions
over FRR's distributed-BFD protocol: bfdd listens (--dplaneaddr unix:<switch dir>/bfd-dp.sock) and
the data plane connects, again whenever bfdd restarts (its sessions then come again).

Why: 368 bfdd processes each wake for every packet they send or receive; one process serving
every switch did the same work for 41 us of CPU a packet against bfdd's 104 us (lab/idle.py,
measured on pod64), about half of either being the kernel forwarding the packet; with the steady
packets in the kernel (below) 15 us.

The packets are real: each switch's two UDP sockets (port 3784 in, one source port out, TTL 255,
CS6) live in its namespace, so a fault on a link (a downed port, a silent drop, a pause) reaches
BFD exactly as it reaches any packet there. Single-hop IPv4 sessions only: the lab has no others.
Once a session is Up and quiet, its packets in both directions are the kernel's (fastpath.py: the
steady packets end and leave in eBPF programs, the detection timer is checked here against their
stamps); FABRIC_TWIN_BFD_FASTPATH=off keeps every packet here, for comparison.

Run: python -m twin.lab.bfd.dataplane <lab dir>; started and ended by lab/bfd/client.py.
"""

from __future__ import annotations

import heapq
import json
import os
import random
import resource
import select
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from twin.lab import publisher
from twin.lab.bfd import fastpath, wire
from twin.lab.bfd.paths import DPLANE_SOCKET, READY, STATS, directory
from twin.lab.bfd.session import Session
from twin.lab.ebpf import layout
from twin.lab.ebpf.libbpf import BpfError
from twin.lab.handle import Lab
from twin.lab.kernel.nsutil import in_netns, interface_indexes
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
# How often the stamps of sessions in the kernel are checked against their detection times: a
# session is declared down at most this much late (numpy over an mmap: ~50 us for 14,000 sessions).
SWEEP_S = 0.02
TICK = 0  # the timer key of a switch's tick (a discriminator is never 0)
FASTPATH_ENV = "FABRIC_TWIN_BFD_FASTPATH"


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
    cookie: int = 0  # its namespace's, as the kernel programs key it
    tick: socket.socket | None = None
    local_address: dict[str, str] = field(default_factory=dict)  # peer address -> this end's (the model's)
    slots: dict[int, int] = field(default_factory=dict)  # local discriminator -> its fast path slot
    heard: dict[int, bytes] = field(default_factory=dict)  # local discriminator -> the peer's last packet
    armed: set[int] = field(default_factory=set)  # sessions whose steady packets are the kernel's
    tick_s: float | None = None  # the interval its ticks keep (that of its armed sessions)


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
        self.fast: fastpath.FastPath | None = None
        self.retired = (0, 0)  # packets the kernel took and sent for sessions since removed
        self.in_kernel: dict[int, tuple[Switch, int, int]] = {}  # slot -> (switch, lid, detection ns)
        self._sweep_index: tuple[np.ndarray, np.ndarray] | None = None  # slots, detection ns; None: stale
        self.rng = random.Random()
        self.publisher: publisher.Publisher | None = None  # started by run(), at its priority

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
            switch = Switch(node.name, rx, tx, self.lab.state.node_dir(node.name) / DPLANE_SOCKET,
                            cookie=layout.netns_cookie(rx))
            for link in self.lab.fabric.links_of(node.name):
                if link.kind == "fabric":
                    peer, local = link.peer(node.name).address.ip, link.endpoint(node.name).address.ip
                    switch.local_address[str(peer)] = str(local)
            self.switches[node.name] = switch
            self._watch(rx, "rx", switch)
        if os.environ.get(FASTPATH_ENV, "on") != "off":
            self._open_fast_path()
        (base / READY).write_text(str(os.getpid()))

    def _open_fast_path(self) -> None:
        """The kernel programs on every switch's ports and loopback; without them (not built, refused)
        every packet stays here, as before."""
        sessions = sum(len(sw.local_address) for sw in self.switches.values())
        try:
            self.fast = fastpath.FastPath(sessions, len(self.switches))
            for switch in self.switches.values():
                netns = self.lab.netns(switch.name)
                index = interface_indexes(netns)
                ports = {ifname: index[ifname] for ifname in
                         (link.endpoint(switch.name).ifname for link in self.lab.fabric.links_of(switch.name)
                          if link.kind == "fabric") if ifname in index}
                self.fast.attach(netns, switch.name, ports, index["lo"])
                with in_netns(netns):
                    switch.tick = fastpath.tick_socket()
        except (BpfError, OSError) as exc:
            print(f"BFD fast path not available ({exc}): every packet is handled here", file=sys.stderr, flush=True)
            if self.fast is not None:
                self.fast.close()
            self.fast = None

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
        self.start_publishing()
        next_stats = next_connect = next_sweep = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            if now >= next_connect:
                self._connect_all()
                next_connect = now + CONNECT_EVERY_S
            if now >= next_sweep:
                self._sweep(now)
                next_sweep = now + SWEEP_S
            timeout = max(0.0, self.timers[0][0] + TIMER_SLACK_S - now) if self.timers else 1.0
            wake = min(next_stats, next_connect, next_sweep if self.in_kernel else next_stats)
            try:
                events = self.poller.poll(min(timeout, max(0.0, wake - now)))
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
        if session.config.lid in switch.armed:
            return  # its packets and timer are the kernel's
        when = session.next_tx if session.detect_at is None else min(session.next_tx, session.detect_at)
        self._at(switch, session.config.lid, when)

    def _at(self, switch: Switch, lid: int, when: float) -> None:
        key = (switch.name, lid)
        if self.scheduled.get(key, float("inf")) <= when:
            return  # an earlier wake-up is queued; it reschedules
        self.scheduled[key] = when
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, switch.name, lid))

    def _fire(self, now: float) -> None:
        while self.timers and self.timers[0][0] <= now:
            when, _seq, name, lid = heapq.heappop(self.timers)
            key = (name, lid)
            if self.scheduled.get(key) != when:
                continue  # superseded
            del self.scheduled[key]
            switch = self.switches[name]
            if lid == TICK:
                self._tick(switch, now)
                continue
            session = switch.sessions.get(lid)
            if session is None or lid in switch.armed:
                continue
            if session.expire(now):
                self._notify(switch, session)
                self._send(switch, session, session.send_now(now))
            self._send(switch, session, session.due_packet(now))
            self._arm_if_steady(switch, session)
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
        if lid in switch.armed:  # not the steady packet the kernel expects: something changed
            self._disarm(switch, session, now)
        switch.heard[lid] = data
        changed, answer = session.receive(packet, now)
        if changed:
            self._notify(switch, session)
        if answer:
            self._send(switch, session, session.send_now(now))
        self._arm_if_steady(switch, session)
        self._schedule(switch, session)

    # -- the kernel's part (fastpath.py) ----------------------------------------------------------
    def _arm_if_steady(self, switch: Switch, session: Session) -> None:
        """Hand the session's packets to the kernel once both ends are Up and quiet: the peer's last
        packet is then the one it will keep sending, and ours the one we would."""
        lid, remote = session.config.lid, session.remote
        if self.fast is None or lid in switch.armed or lid not in switch.slots or remote is None:
            return
        heard = switch.heard.get(lid)
        if (session.state != wire.State.UP or session.polling or session.answer_final or session.silent()
                or remote.state != wire.State.UP or remote.poll or remote.final
                or heard is None or len(heard) != fastpath.CONTROL_LEN):
            return
        port = self.fast.heard(switch.slots[lid])
        local = switch.local_address.get(session.config.dst)
        if port is None or local is None:
            return
        interval_s = max(session.advertised_tx_us, remote.required_min_rx_us) / 1e6
        if switch.tick_s is None:
            switch.tick_s = interval_s
            self._at(switch, TICK, time.monotonic() + interval_s * self.rng.uniform(0.75, 1.0))
        elif switch.tick_s != interval_s:
            return  # another interval than its switch's ticks: it stays here
        peer_mac, local_mac, ifindex = port
        sent = fastpath.frame(peer_mac, local_mac, local, session.config.dst, session.packet().pack())
        slot = switch.slots[lid]
        self.fast.arm(slot, heard, sent, ifindex, time.monotonic_ns())
        switch.armed.add(lid)
        self.in_kernel[slot] = (switch, lid, round(session.detection_time_s() * 1e9))
        self._sweep_index = None
        self.scheduled.pop((switch.name, lid), None)

    def _disarm(self, switch: Switch, session: Session, now: float) -> None:
        """Back to user space: detection from the last packet the kernel took, and our next packet now."""
        lid = session.config.lid
        slot = switch.slots[lid]
        self.fast.disarm(slot)
        switch.armed.discard(lid)
        del self.in_kernel[slot]
        self._sweep_index = None
        if session.remote is not None and session.state in (wire.State.INIT, wire.State.UP):
            session.detect_at = self.fast.last_heard_ns(slot) / 1e9 + session.detection_time_s()
        session.next_tx = now
        self._schedule(switch, session)

    def _tick(self, switch: Switch, now: float) -> None:
        """One tick: the kernel sends every armed session's packet of this switch; the next tick
        jittered, as RFC 5880 jitters a session's packets."""
        if not switch.armed:
            switch.tick_s = None
            return
        try:
            switch.tick.send(fastpath.TICK)
        except OSError:
            self.dropped += 1
        self._at(switch, TICK, now + switch.tick_s * self.rng.uniform(0.75, 1.0))

    def _sweep(self, now: float) -> None:
        """Sessions in the kernel not heard from for their detection time go down, here."""
        if not self.in_kernel:
            return
        if self._sweep_index is None:
            slots = np.fromiter(self.in_kernel, dtype=np.int64, count=len(self.in_kernel))
            detect = np.fromiter((entry[2] for entry in self.in_kernel.values()), dtype=np.int64, count=len(slots))
            self._sweep_index = (slots, detect)
        slots, detect = self._sweep_index
        last = np.frombuffer(self.fast.rx, dtype="<u8", count=self.fast.capacity * fastpath.RX.size // 8)
        heard = last[(slots * fastpath.RX.size + fastpath.RX_OFFSET["last_ns"]) // 8].astype(np.int64)
        for slot in slots[time.monotonic_ns() - heard > detect]:
            switch, lid, _detect = self.in_kernel[int(slot)]
            session = switch.sessions[lid]
            self._disarm(switch, session, now)
            if session.expire(now):
                self._notify(switch, session)
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
        now = time.monotonic()
        for session in list(switch.sessions.values()):
            self._remove_slot(switch, session, now)
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
                self._add_slot(switch, config.lid)
            else:
                if config.lid in switch.armed:  # new settings: the steady packets change
                    self._disarm(switch, session, now)
                if session.reconfigure(config):
                    self._notify(switch, session)
                    self._send(switch, session, session.send_now(now))
            self._schedule(switch, session)
        elif kind == wire.MessageType.DP_DELETE_SESSION:
            config = wire.parse_session(payload)
            session = switch.sessions.get(config.lid)
            if session is not None:
                self._remove_slot(switch, session, now)
                del switch.sessions[config.lid]
                switch.by_peer.pop(config.dst, None)
        elif kind == wire.MessageType.DP_REQUEST_SESSION_COUNTERS:
            (lid,) = wire.COUNTERS_REQUEST.unpack_from(payload)
            session = switch.sessions.get(lid)
            kernel_rx, kernel_tx = self.fast.packets(switch.slots[lid]) if self.fast and lid in switch.slots else (0, 0)
            self._to_bfdd(switch, wire.counters_reply(ident, lid, (session.rx_packets if session else 0) + kernel_rx,
                                                      (session.tx_packets if session else 0) + kernel_tx))
        elif kind == wire.MessageType.ECHO_REQUEST:
            self._to_bfdd(switch, wire.message(wire.MessageType.ECHO_REPLY, payload, ident))

    def _add_slot(self, switch: Switch, lid: int) -> None:
        if self.fast is None:
            return
        slot = self.fast.add(switch.cookie, lid)
        if slot is not None:
            switch.slots[lid] = slot
            self.fast.set_switch(switch.cookie, list(switch.slots.values()))

    def _remove_slot(self, switch: Switch, session: Session, now: float) -> None:
        lid = session.config.lid
        if lid in switch.armed:
            self._disarm(switch, session, now)
        slot = switch.slots.pop(lid, None)
        switch.heard.pop(lid, None)
        if slot is not None:
            rx, tx = self.fast.packets(slot)
            self.retired = (self.retired[0] + rx, self.retired[1] + tx)
            self.fast.remove(switch.cookie, lid, slot)
            self.fast.set_switch(switch.cookie, list(switch.slots.values()))

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
    def start_publishing(self) -> None:
        """The statistics are stored by a thread (lab/publisher.py): a rename waited 0.6 s for the
        file system here, no tick left meanwhile, and the lab's sessions expired together."""
        self.publisher = publisher.Publisher(directory(self.lab.paths.root) / STATS, "the statistics")

    def _publish(self) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        sessions = [s for sw in self.switches.values() for s in sw.sessions.values()]
        kernel_rx, kernel_tx = self._kernel_packets()
        document = {"pid": os.getpid(), "t_mono": time.monotonic(), "switches": len(self.switches),
                    "connected": sum(1 for sw in self.switches.values() if sw.conn is not None),
                    "sessions": len(sessions), "up": sum(1 for s in sessions if s.state == wire.State.UP),
                    "in_kernel": len(self.in_kernel), "fast_path": self.fast is not None,
                    "rx_packets": self.rx_total + kernel_rx, "tx_packets": self.tx_total + kernel_tx,
                    "rx_in_kernel": kernel_rx, "tx_in_kernel": kernel_tx, "tx_failed": self.dropped,
                    "state_changes": self.state_changes, "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}
        self.publisher.submit(json.dumps(document).encode())

    def _kernel_packets(self) -> tuple[int, int]:
        """Packets the kernel took and sent for the sessions, ever."""
        if self.fast is None:
            return 0, 0
        rx = sum(self.fast.packets(slot)[0] for sw in self.switches.values() for slot in sw.slots.values())
        tx = sum(self.fast.packets(slot)[1] for sw in self.switches.values() for slot in sw.slots.values())
        return self.retired[0] + rx, self.retired[1] + tx

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
            for error in self.publisher.errors[-5:]:  # stored nowhere else: the log keeps them
                print(error, file=sys.stderr, flush=True)
        if self.fast is not None:
            self.fast.close()
        for switch in self.switches.values():
            for sock in (switch.rx, switch.tx, switch.conn, switch.tick):
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
