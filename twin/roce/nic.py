"""The NIC of one rank: the UDP sockets of its queue pairs, bound to the rank's host NIC, and a
thread that moves their packets, as an RDMA NIC does beside the application.

- Every QP is a UDP socket of its own (its own source port), so the fabric's ECMP hashes the
  QPs of one rank pair onto different paths, like NCCL's several QPs per connection.
- Sending: packets in order, several at once as one UDP GSO send (each piece a separate
  datagram on the wire, which the fabric's faults act on). The socket's send buffer is small, so
  the host NIC's queue holds about what a NIC has in flight: when PFC pauses the NIC, sends
  stop instead of piling up. No slow start: a QP sends whenever the wire takes it (the host NIC's
  shaper paces at line rate), at most at the rate its congestion control allows.
- Congestion control (`cc`, DCQCN: dcqcn.py): data packets are ECN-capable (ECT(0)); a packet
  that arrives marked CE is answered with a CNP, at most one per QP per CNP interval; a CNP cuts
  its QP's rate, which then recovers on timers and bytes sent. A QP below line rate is paced by a
  token bucket of a few packets; at line rate the host NIC's shaper alone paces it. Without cc
  (`cc: none`) packets are not ECN-capable, so no switch marks them.
- Multipath (`multipath`): packets carry DSCP REORDERABLE_DSCP, so a switch balancing
  adaptively may send each one its own way, and the QPs repeat selectively (selective.py)
  instead of going back N. The NIC sprays them itself too, as Ultra Ethernet's transport does:
  a QP's data leaves from ENTROPY source ports in turn (SPRAY_PACKETS at a time), and its ACKs
  from them too, so a fabric that only hashes (ECMP) spreads one QP over its paths as well.
  Its receiving socket is then not connected (a connected UDP socket takes datagrams from one
  source port only) and takes datagrams from its peer's address alone. `multipath: rc` marks
  the packets of RC QPs (go-back-N) the same way: what a NIC without out-of-order placement
  does on an adaptive fabric.
- Receiving: UDP GRO hands over runs of datagrams at once; each is a packet for the QP state
  machine (qp.py), whose ACKs and NAKs go straight back.
- Timers: the retransmission timers and coalesced ACKs of every QP.
- Paths (paths.py): a QP discovers the path its packets take when it connects and when it loses
  packets; `qp_states` reports each QP's 5-tuple, path and loss counters (the transport-state
  detector reads them, as Xingmai's hosts read their own transport's state).
- Dodging (`path_offsets`, a job's `dodge: offset` on a lab with routing.hash_offset): Xingmai's
  hash dodging per QP. The switches add the low bits of a packet's source port to their hash
  (model/pathhash.py), so the next offset takes a QP onto a path that shares no spine or
  superspine with its old one. A QP that loses packets (a NAK, a timeout, or its outstanding
  packets waiting STALLED_S), or whose peer's ACKs went missing (it receives packets it already
  has), moves: it sends from a socket bound to its port's next offset, at most once a
  DODGE_HOLD_S. Its receiving socket is then not connected, as a sprayed QP's, and takes its
  peer's datagrams from any port.
- Dual-port NICs (`ports`, a lab with fabric.nic_ports: 2): the NIC spreads its QPs over its
  ports as a RoCE LAG does (mlx5's queue affinity): QP k and its sockets on port k mod 2, the
  sprayed sockets of a multipath QP alternating. A port that loses carrier hands its sockets to
  the other port, and takes them back when its carrier returns (lag.py, CARRIER_CHECK_S); what a
  QP had queued on the dead port (dropped with its carrier) it sends again on the other at once.
The collective thread posts sends and receives and waits for their completion (`wait`). The
NIC's thread wakes it when a request is done or failed, not on every turn: a wake-up a turn (a
few thousand a second at line rate) cost the sender and receiver 30 % of their CPU (57 against
40 us a packet, two NICs at 200 Mbit/s), on a machine whose cores the ranks fill.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from twin.roce import wire
from twin.roce.dcqcn import NotificationPoint, Pacer, ReactionPoint, ScaledParams
from twin.roce.lag import PortAffinity
from twin.roce.paths import MAX_TTL, STALLED_S, PathDiscovery
from twin.roce.qp import QueuePair, RecvRequest, SendRequest, Stats, Timers, TransportError
from twin.roce.selective import SelectiveQueuePair
from twin.roce.wire import ACK, CNP, DATA, HEADER, IP_UDP_HEADERS, NAK, SACK, Header, payload_per_packet, unpack
from twin.sockopts import SO_RCVBUFFORCE, bind_device, time_exceeded

UDP_SEGMENT, UDP_GRO = 103, 104
ECT0, ECN_MASK, ECN_CE = 0x02, 0x03, 0x03
PACED_PACKETS = 4  # a paced QP's burst: few packets, so a cut rate shows at once on the wire
SEND_BUFFER = 128 * 1024  # about what a NIC holds in flight on the host side
# A NIC does not drop what arrives because the host's CPU is busy; its emulation's sockets must
# not either. SO_RCVBUF is capped by net.core.rmem_max (208 KB on a fresh Debian, 4 MB on the
# benchmark VM: there, 8 MB of kernel memory, some 0.3 s of a QP's share of an incast of jumbo
# frames); FORCE sets it past the cap where the process may (root: the incasts, the runner), and
# a rank, which runs as a user of its own, gets what the cap allows.
RECEIVE_BUFFER = 16 << 20
MAX_GSO_BYTES = 65000
READS_PER_TURN = 64  # datagrams read per socket per turn, so one busy QP cannot starve the rest
# Entropy values (source ports) a multipath QP sprays over. Ultra Ethernet speaks of 64-256 on
# fabrics of hundreds of paths; the twin's labs have 2-8 between two leaves. With 16 values a
# hash leaves all of them on one of two paths once in 32,768 QPs (with 8: once in 128).
ENTROPY = 16
# Packets sent from one source port before the next, as one GSO batch. Short: the collision ring
# (bench/multipath.py, rail4, packet-balancing switches) ran 0.60-0.64 of line at 7 a batch,
# 0.73-0.87 at 4 (mean 0.78), 0.83-0.92 at 2 (mean 0.87) and 0.83-0.93 at 1 (a sendmsg a packet:
# the cores 95 % busy); docs/benchmarks.md.
SPRAY_PACKETS = 2
# After a move, the losses of packets sent down the old path still come back for a round trip or
# so (NAKs, duplicates): a QP moves again only on news after this. A round trip of a busy twin's
# path is about 1 ms; a loss on the new path every 0.1 s is a bad new path, and the QP moves on.
DODGE_HOLD_S = STALLED_S


def send_through_answers(sock: socket.socket, data: bytes, ancillary: list, read_answers: Callable[[], None],
                         address: tuple[str, int] | None = None) -> None:
    """Send, though ICMP answers keep arriving. Each answer path discovery gets (IP_RECVERR) fails
    the socket's next send once, sending nothing; the answers are read and the send tried again,
    as often as a discovery has answers. Trying once more was not enough: an answer that came
    between the read and the retry lost the retry too, which go-back-N took as a loss, and its
    timeouts started more discoveries (a CI run of 2026-11-28: a 3-retry QP failed before its
    fault). BlockingIOError (a full send queue) and a lasting error are the caller's. `address`:
    where to, for a socket that is not connected."""
    target = () if address is None else (0, address)
    for _attempt in range(MAX_TTL):
        try:
            sock.sendmsg([data], ancillary, *target)
            return
        except BlockingIOError:
            raise
        except OSError:
            read_answers()
    sock.sendmsg([data], ancillary, *target)


class CollectiveTimeout(RuntimeError):
    pass


class PeerAborted(RuntimeError):
    """Another rank of the group failed and said so: this one stops waiting (as a job's launcher
    tears every rank down when one fails)."""


ABORT_CHECK_S = 0.2


@dataclass
class Endpoint:
    qp: QueuePair
    sock: socket.socket
    peer: str = ""  # who is at the other end, for error messages
    writable: bool = True
    rate: ReactionPoint | None = None  # DCQCN's sending side (None: no congestion control)
    notify: NotificationPoint | None = None  # and its receiving side
    pacer: Pacer | None = None
    send_at: float = 0.0  # paced: not before this
    path: PathDiscovery | None = None  # single-path QPs: where their packets go
    losses_seen: int = 0  # NAKs and timeouts when the path was last discovered
    remote: tuple[str, int] | None = None  # the peer's address and port
    spray: list[socket.socket] = field(default_factory=list)  # multipath: the data's source ports
    turn: int = 0  # the spray socket that sends data next
    control_turn: int = 0  # and the one that sent the last ACK, NAK or CNP
    blocked: int | None = None  # the spray socket whose full send queue the NIC waits on
    connected: bool = False  # its socket takes datagrams from the peer's port only
    out: socket.socket | None = None  # dodging: the socket it sends from since it moved
    moved_at: float = float("-inf")
    losses_heard: int = 0  # its NAKs and timeouts when dodging last looked
    duplicates_heard: int = 0  # and the packets it received again

    def data_socket(self) -> socket.socket:
        return self.spray[self.turn] if self.spray else self.out or self.sock

    def sockets(self) -> list[socket.socket]:
        """Every socket of the QP: its own, its spray sockets, the one it dodged to."""
        return [self.sock, *self.spray, *([self.out] if self.out else [])]

    def next_turn(self) -> None:
        if self.spray:
            self.turn = (self.turn + 1) % len(self.spray)


def multipath_setting(multipath: bool | str) -> str:
    """A job's `multipath` as the transport reads it from its environment (roce/backend.py):
    "1" selective repeat over sprayed packets, "rc" RC QPs whose packets are sprayed, "0" neither."""
    return "rc" if multipath == "rc" else "1" if multipath else "0"


def multipath_modes(setting: str) -> dict[str, bool]:
    """FABRIC_TWIN_ROCE_MULTIPATH ("1", "rc" or "0") -> the Nic's `multipath` and `reorderable`."""
    return {"multipath": setting == "1", "reorderable": setting in ("1", "rc")}


class Nic:
    def __init__(self, address: str, ifname: str, mtu: int, timers: Timers, label: str = "",
                 dcqcn: ScaledParams | None = None, new_socket: Callable[[], socket.socket] | None = None,
                 multipath: bool = False, reorderable: bool | None = None, path_offsets: int = 0,
                 ports: tuple[str, ...] = ()):
        """new_socket: where a QP's UDP socket comes from (default: this process's namespace, as a
        rank's; a tool driving several hosts' NICs from one process opens them in theirs).
        path_offsets: dodge (the fabric's path offsets: the source port modulo this; 0: do not).
        ifname: the interface its sockets are bound to ("": none, the host's routes choose);
        ports: a dual-port NIC's ports, over which it spreads its QPs itself (module doc)."""
        if path_offsets and multipath:
            raise ValueError("a multipath QP sprays its packets over every path already: it does not dodge")
        self.address, self.ifname, self.label = address, ifname, label
        self.new_socket = new_socket or (lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        self.dcqcn = dcqcn
        self.multipath = multipath
        self.path_offsets = path_offsets
        # Packets marked reorderable: a multipath NIC's always; an RC NIC's too with `multipath: rc`,
        # as a NIC without out-of-order placement on an adaptive fabric (go-back-N on every reorder).
        self.reorderable = multipath if reorderable is None else reorderable
        self.payload = payload_per_packet(mtu)
        self.segment = HEADER.size + self.payload
        self.wire_packet = self.segment + IP_UDP_HEADERS  # what a full packet costs at the rate
        self.max_segments = max(1, min(64, MAX_GSO_BYTES // self.segment))
        self.timers = timers
        self.endpoints: dict[int, Endpoint] = {}  # local QP number -> endpoint
        self.by_fd: dict[int, Endpoint] = {}
        self.cond = threading.Condition()
        self.poller = select.epoll()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.poller.register(self._wake_r, select.EPOLLIN)
        self.closed = False
        self.finished = 0  # the QPs' finished requests the collective's thread was last woken for
        self.ports = PortAffinity(ports, self.new_socket) if len(ports) > 1 else None
        self._qps_opened = 0
        self._thread = threading.Thread(target=self._run, name=f"nic-{label}", daemon=True)
        self._thread.start()

    # --- set-up ----------------------------------------------------------------------------------
    def _socket(self, send_buffer: int, port: int = 0, lane: int = 0) -> socket.socket:
        """A UDP socket on this NIC, marked as its data goes out, bound to `port` (0: a port of
        its own); on a dual-port NIC, to its port `lane` mod 2."""
        sock = self.new_socket()
        bind_device(sock, self.ifname)
        if self.ports is not None:
            self.ports.place(sock, lane)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        tos = (wire.REORDERABLE_DSCP << 2 if self.reorderable else 0) | (ECT0 if self.dcqcn is not None else 0)
        if tos:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        try:
            sock.bind((self.address, port))
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        return sock

    def open_qp(self, qpn: int) -> int:
        """A QP's socket on this NIC; returns its UDP port (the peer connects to it)."""
        lane, self._qps_opened = self._qps_opened, self._qps_opened + 1
        sock = self._socket(SEND_BUFFER, lane=lane)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
        except PermissionError:  # a rank runs as its own user (lab/identity.py): capped by rmem_max
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        sock.setsockopt(socket.SOL_UDP, UDP_GRO, 1)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        # The spray sockets share the QP's send buffer, so the host holds what one socket would.
        spray = [self._socket(SEND_BUFFER // ENTROPY, lane=lane + 1 + k) for k in range(ENTROPY)] \
            if self.multipath else []
        kind = SelectiveQueuePair if self.multipath else QueuePair
        with self.cond:
            endpoint = Endpoint(kind(qpn, -1, self.payload, self.timers), sock, spray=spray)
            if self.dcqcn is not None:
                now = time.monotonic()
                spans = len(self.ports.ports) if self.ports is not None and self.multipath else 1
                endpoint.rate = ReactionPoint(self.dcqcn.spanning(spans) if spans > 1 else self.dcqcn, now)
                endpoint.notify = NotificationPoint(self.dcqcn.cnp_interval_s)
                endpoint.pacer = Pacer(burst=PACED_PACKETS * self.wire_packet, at=now)
            self.endpoints[qpn] = endpoint
            self.by_fd[sock.fileno()] = endpoint
        return sock.getsockname()[1]

    def connect_qp(self, qpn: int, remote_qpn: int, address: str, port: int, peer: str) -> None:
        endpoint = self.endpoints[qpn]
        endpoint.qp.remote, endpoint.peer, endpoint.remote = remote_qpn, peer, (address, port)
        # A sprayed or dodging QP's peer sends from more than one port: its socket takes them all.
        if not endpoint.spray and not self.path_offsets:
            endpoint.sock.connect((address, port))
            endpoint.connected = True
        with self.cond:
            if not self.multipath:
                endpoint.path = PathDiscovery(endpoint.sock, qpn, (address, port))
                endpoint.path.start(time.monotonic())
        self.poller.register(endpoint.sock.fileno(), select.EPOLLIN)

    # --- posting and waiting (the collective's thread) ------------------------------------------
    def post_send(self, qpn: int, data: memoryview) -> SendRequest:
        with self.cond:
            request = self.endpoints[qpn].qp.post_send(data)
        os.write(self._wake_w, b"s")
        return request

    def post_recv(self, qpn: int, buffer: memoryview) -> RecvRequest:
        with self.cond:
            return self.endpoints[qpn].qp.post_recv(buffer)

    def wait(self, requests: list, timeout_s: float, what: str = "recv", aborted=None) -> None:
        """Until every request is done; TransportError if a QP failed, CollectiveTimeout after
        `timeout_s` (gloo's wording, so the runner tells a timeout from a transport error),
        PeerAborted when `aborted()` (checked every ABORT_CHECK_S) returns why another rank gave up."""
        deadline = time.monotonic() + timeout_s
        next_check = time.monotonic() + ABORT_CHECK_S
        with self.cond:
            while True:
                if aborted is not None and time.monotonic() >= next_check:
                    next_check = time.monotonic() + ABORT_CHECK_S
                    reason = aborted()
                    if reason:
                        raise PeerAborted(f"Connection closed by peer: {reason}")
                failed = next((r for r in requests if r.error), None)
                if failed is not None:
                    endpoint = self.endpoints[failed.qpn]
                    raise TransportError(f"{failed.error}: QP {endpoint.qp.local} from {self.label} "
                                         f"({self.address}) to {endpoint.peer}")
                if all(r.done for r in requests):
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CollectiveTimeout(f"Timed out waiting {timeout_s * 1000:.0f}ms for {what} operation "
                                            f"to complete on the roce transport ({self.label})")
                self.cond.wait(min(left, 0.05))

    def stats(self) -> Stats:
        total = Stats()
        with self.cond:
            for endpoint in self.endpoints.values():
                total.add(endpoint.qp.stats)
        return total

    def errors(self) -> int:
        with self.cond:
            return sum(1 for e in self.endpoints.values() if e.qp.error)

    def rate_share(self) -> float:
        """The mean sending rate its congestion control allows this NIC's QPs, as a share of line
        rate (1.0 without congestion control)."""
        with self.cond:
            rates = [e.rate.rate_bps / e.rate.params.line_bps for e in self.endpoints.values() if e.rate]
        return round(sum(rates) / len(rates), 4) if rates else 1.0

    def qp_states(self) -> list[dict]:
        """Every connected QP: its 5-tuple, its newest discovered path (`traced`: the discovery's
        number, `path`: TTL -> switch address), what it sent and lost (data packets, NAKs
        received, timeouts, packets sent again) since it opened, and how long its outstanding
        packets have waited for an acknowledgement (ms, 0: none outstanding)."""
        now = time.monotonic()
        states = []
        with self.cond:
            for qpn, e in self.endpoints.items():
                if e.qp.remote < 0 or e.qp.error:
                    continue
                traced, path = (e.path.discovered(now) if e.path else None) or (0, None)
                states.append({"qp": qpn, "sport": e.data_socket().getsockname()[1], "dst": e.remote[0],
                               "dport": e.remote[1], "traced": traced, "path": path,
                               "sent": e.qp.stats.data_packets, "naks": e.qp.stats.naks_received,
                               "timeouts": e.qp.stats.timeouts, "resent": e.qp.stats.retrans_packets,
                               "waiting_ms": round(e.qp.waiting_s(now) * 1000)})
        return states

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        os.write(self._wake_w, b"q")
        self._thread.join(timeout=2)
        for endpoint in self.endpoints.values():
            for sock in endpoint.sockets():
                sock.close()
        if self.ports is not None:
            self.ports.close()
        self.poller.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    # --- the NIC's thread --------------------------------------------------------------------------
    def _run(self) -> None:
        while not self.closed:
            with self.cond:
                deadlines = [d for d in (e.qp.next_deadline() for e in self.endpoints.values()) if d is not None]
                deadlines += [e.send_at for e in self.endpoints.values() if e.qp.sending and e.send_at]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else 0.1
            events = self.poller.poll(min(timeout, 0.1))
            with self.cond:
                if self.closed:
                    return
                now = time.monotonic()
                for fd, mask in events:
                    if fd == self._wake_r:
                        try:
                            os.read(self._wake_r, 4096)
                        except BlockingIOError:
                            pass
                        continue
                    endpoint = self.by_fd.get(fd)
                    if endpoint is None:
                        continue
                    if endpoint.blocked is not None and fd == endpoint.spray[endpoint.blocked].fileno():
                        self.poller.unregister(fd)  # a spray socket's queue has room again
                        del self.by_fd[fd]
                        endpoint.blocked, endpoint.writable = None, True
                        continue
                    if mask & select.EPOLLERR:
                        self._read_errors(endpoint, fd)
                    if mask & select.EPOLLOUT:
                        endpoint.writable = True
                        self.poller.modify(fd, select.EPOLLIN if fd == endpoint.sock.fileno() else 0)
                    if mask & select.EPOLLIN:
                        self._receive(endpoint, now)
                now = time.monotonic()
                if self.ports is not None:
                    self._leave_dead_ports(now)
                for endpoint in self.endpoints.values():
                    qp = endpoint.qp
                    if qp.remote < 0:
                        continue
                    qp.on_timer(now)
                    if self.path_offsets:
                        self._dodge(endpoint, now)
                    self._rediscover(endpoint, now)
                    ack = qp.poll_ack(now)
                    if ack is not None:
                        self._control(endpoint, ack)
                    if qp.sending and endpoint.writable and now >= endpoint.send_at:
                        self._send(endpoint, now)
                finished = sum(e.qp.finished for e in self.endpoints.values())
                if finished != self.finished:  # wake the collective's thread only when it has news
                    self.finished = finished
                    self.cond.notify_all()

    def _leave_dead_ports(self, now: float) -> None:
        """A QP whose port lost carrier sends again, from the other port, what it had handed the dead
        one: that sat in the port's queue, which the kernel empties when the carrier goes (a NIC's
        port that dies never sends what it had not yet sent). Without this a QP that had everything
        outstanding queued there waited for its retransmission timeout (4.3 s at NCCL's default)."""
        fled = self.ports.follow_carrier(now)
        if not fled:
            return
        for endpoint in self.endpoints.values():
            if endpoint.qp.remote >= 0 and any(sock.fileno() in fled for sock in endpoint.sockets()):
                endpoint.qp.repath()

    def _rediscover(self, endpoint: Endpoint, now: float) -> None:
        """A QP that lost packets, or waits for them, discovers its path again: a reroute may have
        moved it, and where the answers stop tells where its packets stop."""
        if endpoint.path is None:
            return
        losses = endpoint.qp.stats.naks_received + endpoint.qp.stats.timeouts
        if losses > endpoint.losses_seen or endpoint.qp.waiting_s(now) >= STALLED_S:
            endpoint.losses_seen = losses
            endpoint.path.start(now)

    def _read_errors(self, endpoint: Endpoint, fd: int) -> None:
        """A socket's error queue: path discovery's answers on the socket the QP sends from; on
        another (the one it sent from before a move), late answers, dropped (else EPOLLERR stays)."""
        if endpoint.path is not None and fd == endpoint.path.sock.fileno():
            endpoint.path.read_answers()
            return
        sock = next((s for s in (endpoint.sock, endpoint.out) if s is not None and s.fileno() == fd), None)
        if sock is not None:
            for _answer in time_exceeded(sock):
                pass

    def _dodge(self, endpoint: Endpoint, now: float) -> None:
        """Move a QP that loses packets, or whose ACKs went missing, to its next path offset."""
        qp = endpoint.qp
        losses = qp.stats.naks_received + qp.stats.timeouts
        lost = losses > endpoint.losses_heard or qp.waiting_s(now) >= STALLED_S
        acks_lost = qp.stats.duplicates > endpoint.duplicates_heard
        endpoint.losses_heard, endpoint.duplicates_heard = losses, qp.stats.duplicates
        if not (lost or acks_lost) or now - endpoint.moved_at < DODGE_HOLD_S or qp.error:
            return
        current = endpoint.data_socket()
        port = current.getsockname()[1]
        base = port - port % self.path_offsets
        # The next offset; if another socket holds that port, the next odd step: with two members
        # in every ECMP group (the twin's Clos labs) any odd step moves every hop.
        for step in range(1, self.path_offsets, 2):
            try:
                sock = self._socket(SEND_BUFFER, base + (port + step) % self.path_offsets)
                break
            except OSError:
                continue
        else:
            return
        self.poller.register(sock.fileno(), 0)  # its error queue: path discovery's answers
        self.by_fd[sock.fileno()] = endpoint
        if endpoint.out is not None:
            self.poller.unregister(endpoint.out.fileno())
            del self.by_fd[endpoint.out.fileno()]
            endpoint.out.close()
        endpoint.out, endpoint.moved_at, endpoint.writable = sock, now, True
        qp.stats.dodges += 1
        if endpoint.path is not None:
            endpoint.path.moved(sock, now)
        if lost:  # what is outstanding went down the old path: send it again on the new one
            qp.repath()

    def _sendmsg(self, endpoint: Endpoint, data: bytes, ancillary: list, sock: socket.socket | None = None) -> None:
        """Send on the QP's socket (or one of its spray sockets, or the one it moved to):
        connected, or to the peer."""
        sock = sock or endpoint.out or endpoint.sock
        if endpoint.spray:
            sock.sendmsg([data], ancillary, 0, endpoint.remote)
            return
        send_through_answers(sock, data, ancillary,
                             endpoint.path.read_answers if endpoint.path is not None else lambda: None,
                             None if endpoint.connected else endpoint.remote)

    def _send(self, endpoint: Endpoint, now: float) -> None:
        qp = endpoint.qp
        endpoint.send_at = 0.0
        while qp.sending:
            packets = qp.peek(SPRAY_PACKETS if endpoint.spray else self.max_segments)
            cut = next((i + 1 for i, (_h, piece) in enumerate(packets) if len(piece) != self.payload), len(packets))
            packets = packets[:cut]  # only the batch's last datagram may be short (GSO)
            paced = self._paced(endpoint, now)
            if paced is not None:
                if paced < 1:
                    return
                packets = packets[:paced]
            data = b"".join(part for header, piece in packets for part in (header.pack(), piece))
            try:
                gso = [] if len(packets) == 1 else [(socket.SOL_UDP, UDP_SEGMENT, struct.pack("H", self.segment))]
                self._sendmsg(endpoint, data, gso, endpoint.data_socket())
            except BlockingIOError:  # the host NIC's queue is full (or PFC paused it): wait to be writable
                endpoint.writable = False
                if endpoint.spray:  # a spray socket: watched until it has room (it receives nothing)
                    fd = endpoint.spray[endpoint.turn].fileno()
                    endpoint.blocked = endpoint.turn
                    self.by_fd[fd] = endpoint
                    self.poller.register(fd, select.EPOLLOUT)
                else:
                    sock = endpoint.data_socket()
                    self.poller.modify(sock.fileno(), (select.EPOLLIN if sock is endpoint.sock else 0) |
                                       select.EPOLLOUT)
                return
            except OSError:  # no route, for now: the timer sends it again
                qp.commit(packets, now)
                return
            qp.commit(packets, now)
            endpoint.next_turn()
            if endpoint.rate is not None:
                wire = len(data) + IP_UDP_HEADERS * len(packets)
                endpoint.rate.on_sent(wire, now)
                if paced is not None:
                    endpoint.pacer.spend(wire)

    def _paced(self, endpoint: Endpoint, now: float) -> int | None:
        """How many full packets a QP below line rate may send now (0: none; then `send_at` says
        when); None: it runs at line rate, unpaced."""
        rate = endpoint.rate
        if rate is None:
            return None
        rate.advance(now)
        if rate.rate_bps >= rate.params.line_bps:
            endpoint.pacer.tokens, endpoint.pacer.at = 0.0, now  # nothing saved up while unpaced
            return None
        fit = int(endpoint.pacer.allowed(rate.rate_bps, now) // self.wire_packet)
        if fit < 1:
            endpoint.send_at = endpoint.pacer.ready_at(rate.rate_bps, self.wire_packet)
        return max(0, fit)

    def _control(self, endpoint: Endpoint, header: Header) -> None:
        """ACK, NAK and CNP: not ECN-capable (a NIC sends them at a high priority, unmarked). A
        multipath QP sprays them over its source ports as it does its data, marked reorderable:
        on one path, a failed link below the spine they hash to would take every ACK until
        routing withdraws it (an adaptive switch keeps an ACK where its queues are equally
        empty), and the sender would probe and resend what had arrived (bench/uplink_downlink.py).
        A spray socket whose queue is full (data waiting in it) leaves the ACK to the QP's own."""
        ancillary = [] if endpoint.rate is None else \
            [(socket.IPPROTO_IP, socket.IP_TOS, bytes([wire.REORDERABLE_DSCP << 2 if self.multipath else 0]))]
        try:
            if endpoint.spray:
                endpoint.control_turn = (endpoint.control_turn + 1) % len(endpoint.spray)
                try:
                    self._sendmsg(endpoint, header.pack(), ancillary, endpoint.spray[endpoint.control_turn])
                    return
                except BlockingIOError:
                    pass
            self._sendmsg(endpoint, header.pack(), ancillary)
        except OSError:  # a lost ACK or NAK is what the timers are for; a lost CNP, the next mark's
            pass

    def _receive(self, endpoint: Endpoint, now: float) -> None:
        for _ in range(READS_PER_TURN):
            try:
                data, ancillary, _flags, address = endpoint.sock.recvmsg(1 << 16, 2 * socket.CMSG_SPACE(4))
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # an ICMP error queued on the socket (the peer's port is gone)
                continue
            if not data or (endpoint.spray and endpoint.remote and address[0] != endpoint.remote[0]):
                continue  # a sprayed QP's socket is not connected: only its peer's datagrams count
            size, marked = len(data), False
            for level, kind, value in ancillary:
                if level == socket.SOL_UDP and kind == UDP_GRO:
                    size = struct.unpack("i", value[:4])[0]
                elif level == socket.IPPROTO_IP and kind == socket.IP_TOS:
                    marked = value[0] & ECN_MASK == ECN_CE  # GRO merges only packets of one TOS
            view = memoryview(data)
            for start in range(0, len(data), size or len(data)):
                self._packet(endpoint, view[start:start + size], now, marked)

    def _packet(self, endpoint: Endpoint, datagram: memoryview, now: float, marked: bool = False) -> None:
        header = unpack(datagram)
        if header is None:
            return
        qp = endpoint.qp
        if header.opcode == DATA:
            controls, _done = qp.on_data(header, datagram[HEADER.size:], now)
            for control in controls:
                self._control(endpoint, control)
            if marked:
                qp.stats.ecn_marked += 1
                if endpoint.notify is not None and endpoint.notify.on_marked(now):
                    qp.stats.cnps_sent += 1
                    self._control(endpoint, Header(CNP, qp.remote, 0))
        elif header.opcode == CNP:
            qp.stats.cnps_received += 1
            if endpoint.rate is not None:
                endpoint.rate.on_cnp(now)
        elif header.opcode == ACK:
            qp.on_ack(header.psn, now)
        elif header.opcode == NAK:
            qp.on_nak(header.psn, now)
        elif header.opcode == SACK and isinstance(qp, SelectiveQueuePair):
            qp.on_sack(header.psn, header.msg, now, wire.sack_bits(header))
