"""A gloo rank's TCP connections as transport state, read the way a host agent reads its sockets
(Xingmai's end-side detection reads the hosts' TCP state as well as their RDMA state): what each
connection sent, retransmitted and waits for, from the kernel's own account (TCP_INFO), and the
path its packets take, discovered with packets of its own 5-tuple.

Counters: getsockopt(TCP_INFO) on the rank's own connected sockets (gloo's; found by their file
descriptors, each read without taking it over). `sent` is the data segments sent (retransmissions
included), `resent` the segments retransmitted, `spurious` the retransmissions the peer reported
as duplicates (D-SACK: the original had arrived), `timeouts` its retransmission timeouts
(tcpi_total_rto, Linux 6.7 on; 0 before), and `naks` the losses: retransmissions neither
spurious nor the one each timeout sends first (so that a loss a timer repaired counts once, as a
RoCE QP's does). Healthy connections retransmit too: a tail loss probe resends a connection's
last segment when its acknowledgement is late (a delayed ACK), and the peer's D-SACK says so an
RTT later; on rail4 under an allreduce every retransmission of the healthy connections was one
(126 of 126; the lossy link's: 361 of 375 were losses). A read that falls between the two would
count it: a loss counts once two reads have seen it (a D-SACK comes within milliseconds; reads
are QP_REPORT_S apart). A connection waits while it has
unacknowledged data and its acknowledged bytes do not move: `waiting_ms` counts from the read that
first saw it so.

Paths: gloo's sockets are the kernel's, and TCP has no datagram to send with a TTL of its own, so
a discovery sends raw TCP segments with the connection's 5-tuple (so ECMP hashes them like its
data) and TTL 1 to the switches on the way to the peer, never further: a segment the peer's TCP
received would be answered (a duplicate acknowledgement). Each switch answers ICMP time-exceeded
from its ingress address; the answer quotes the segment's IP header, whose identification field
carries the TTL. A raw socket needs CAP_NET_RAW, which a rank gives up (lab/identity.py): the
tracer's two sockets are opened before. The peer's TCP never sees the probes; the rank's own
TCP gets the answers too and takes them for a soft error outside its window (tcp_v4_err).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from twin.inet import checksum
from twin.roce.paths import STALLED_S, Discovery
from twin.sockopts import ICMP_TIME_EXCEEDED, SO_RCVBUFFORCE

TCP_ESTABLISHED = 1
INFO_BYTES = 256
# struct tcp_info (linux/tcp.h): the fields read, at their offsets
INFO_FIELDS = {"state": (0, "B"), "unacked": (24, "I"), "total_retrans": (100, "I"), "bytes_acked": (120, "Q"),
               "data_segs_out": (156, "I"), "dsack_dups": (216, "I"), "total_rto": (240, "H")}
# A probe's IP identification: this plus its TTL. Only a probe's answers are read: the fabric
# never lets the connections' own segments expire (their TTL is 64; a path has 5 switches at most).
PROBE_ID = 0x7A00
ANSWER_BUFFER = 1 << 20  # every ICMP the host gets queues here between discoveries; read at each
IP = struct.Struct("!BBHHHBBH4s4s")
TCP = struct.Struct("!HHIIBBHHH")


def tcp_info(sock: socket.socket) -> dict[str, int]:
    """The TCP_INFO fields named in INFO_FIELDS (a field past what this kernel reports: 0)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, INFO_BYTES)
    return {name: struct.unpack_from(kind, info, offset)[0] if offset + struct.calcsize(kind) <= len(info) else 0
            for name, (offset, kind) in INFO_FIELDS.items()}


@dataclass(frozen=True)
class Connection:
    local: tuple[str, int]
    peer: tuple[str, int]


def own_connections() -> list[tuple[Connection, dict[str, int]]]:
    """This process's established IPv4 TCP connections and their TCP_INFO. Each socket is read
    through its descriptor without taking it over (detached, never closed here); one closed or
    reused meanwhile by another thread is skipped or read as what it now is."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=int(name))
        except OSError:  # closed meanwhile, or no longer a socket
            continue
        try:
            if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM:
                continue
            info = tcp_info(sock)
            if info["state"] == TCP_ESTABLISHED:
                found.append((Connection(sock.getsockname(), sock.getpeername()), info))
        except OSError:
            continue
        finally:
            sock.detach()
    return found


def probe_segment(connection: Connection, ttl: int) -> bytes:
    """An IP packet carrying a bare TCP acknowledgement of the connection's 5-tuple, TTL `ttl`."""
    src, dst = socket.inet_aton(connection.local[0]), socket.inet_aton(connection.peer[0])
    header = TCP.pack(connection.local[1], connection.peer[1], 0, 0, 5 << 4, 0x10, 0, 0, 0)
    pseudo = struct.pack("!4s4sBBH", src, dst, 0, socket.IPPROTO_TCP, len(header))
    tcp = header[:16] + struct.pack("!H", checksum(pseudo + header)) + header[18:]
    # the IP checksum left 0: the kernel fills it, and the total length, for IP_HDRINCL (raw(7))
    ip = IP.pack(0x45, 0, IP.size + len(tcp), PROBE_ID + ttl, 0x4000, ttl, socket.IPPROTO_TCP, 0, src, dst)
    return ip + tcp


def quoted_probe(packet: bytes) -> tuple[Connection, int, str] | None:
    """An ICMP time-exceeded answer to a probe (as a raw ICMP socket reads it, IP header first):
    the probed connection, the probe's TTL and the answering address; None for any other ICMP."""
    outer = (packet[0] & 0x0F) * 4
    if len(packet) < outer + 8 + IP.size + 4 or packet[outer] != ICMP_TIME_EXCEEDED:
        return None
    quoted = packet[outer + 8:]
    _vhl, _tos, _len, ident, _frag, _ttl, protocol, _sum, src, dst = IP.unpack_from(quoted)
    ports_at = (quoted[0] & 0x0F) * 4
    if protocol != socket.IPPROTO_TCP or not PROBE_ID < ident <= PROBE_ID + 0xFF or len(quoted) < ports_at + 4:
        return None
    sport, dport = struct.unpack_from("!HH", quoted, ports_at)
    connection = Connection((socket.inet_ntoa(src), sport), (socket.inet_ntoa(dst), dport))
    return connection, ident - PROBE_ID, socket.inet_ntoa(packet[12:16])


class Tracer:
    """The rank's two raw sockets: one sends probes from the NIC's address (so through its rail's
    routing table), one reads the ICMP answers the host gets (every rank on the host reads its
    copy, and takes its own connections' answers). Opened while the rank is still root."""

    def __init__(self, address: str):
        self.send = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.send.bind((address, 0))
        self.receive = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        self.receive.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, ANSWER_BUFFER)
        self.receive.setblocking(False)

    def probe(self, connection: Connection, ttl: int) -> None:
        try:
            self.send.sendto(probe_segment(connection, ttl), (connection.peer[0], 0))
        except OSError as exc:  # no route now (the rail's link is down): the discovery gets no answer
            if exc.errno not in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENOBUFS):
                raise

    def answers(self) -> list[tuple[Connection, int, str]]:
        """The probes' answers queued since the last call (other ICMP read and dropped)."""
        found = []
        while True:
            try:
                answer = quoted_probe(self.receive.recv(2048))
            except BlockingIOError:  # the socket is non-blocking: nothing more queued
                return found
            if answer is not None:
                found.append(answer)

    def close(self) -> None:
        self.send.close()
        self.receive.close()


class TcpDiscovery(Discovery):
    def __init__(self, tracer: Tracer, connection: Connection, switches: int):
        super().__init__(switches)
        self.tracer, self.connection = tracer, connection

    def probe(self, ttl: int) -> None:
        self.tracer.probe(self.connection, ttl)


@dataclass
class Watched:
    """What the reader keeps of one connection between reads."""
    discovery: TcpDiscovery
    timeouts: int = 0
    losses: int = 0  # the losses the last read computed
    reported: int = 0  # the losses reported (seen by two reads)
    acked: int = -1
    waiting_since: float | None = None


class TcpState:
    """A rank's connections as `qps` entries (the fields roce/nic.py `qp_states` reports, so the
    transport-state detector reads both alike). `switches_to(peer address)`: the switches between
    this NIC and the peer's, the TTLs a discovery sends."""

    def __init__(self, tracer: Tracer, switches_to: Callable[[str], int]):
        self.tracer, self.switches_to = tracer, switches_to
        self.watched: dict[Connection, Watched] = {}

    def states(self) -> list[dict]:
        now = time.monotonic()
        for connection, ttl, offender in self.tracer.answers():
            if connection in self.watched:
                self.watched[connection].discovery.answer(ttl, offender)
        states, seen = [], set()
        for connection, info in own_connections():
            seen.add(connection)
            watched = self.watched.get(connection)
            if watched is None:
                if info["data_segs_out"] == 0:
                    continue  # not carrying data yet: traced once it does
                watched = self.watched[connection] = Watched(
                    TcpDiscovery(self.tracer, connection, self.switches_to(connection.peer[0])))
                watched.discovery.start(now)
            states.append(self._state(connection, watched, info, now))
        for gone in set(self.watched) - seen:
            del self.watched[gone]
        return states

    def _state(self, connection: Connection, watched: Watched, info: dict[str, int], now: float) -> dict:
        if info["unacked"] == 0:
            watched.waiting_since = None
        elif info["bytes_acked"] != watched.acked or watched.waiting_since is None:
            watched.waiting_since = now  # a wait (the newest data unacknowledged) counted from here
        watched.acked = info["bytes_acked"]
        waiting_ms = round((now - watched.waiting_since) * 1000) if watched.waiting_since is not None else 0
        losses = max(0, info["total_retrans"] - info["dsack_dups"] - info["total_rto"])
        if losses > watched.losses or info["total_rto"] > watched.timeouts or waiting_ms >= STALLED_S * 1000:
            watched.discovery.start(now)  # a loss or a wait: a reroute may have moved it (at most once a RETRACE_S)
        watched.reported = max(watched.reported, min(watched.losses, losses))
        watched.losses, watched.timeouts = losses, info["total_rto"]
        traced, path = watched.discovery.discovered(now) or (0, None)
        return {"qp": connection.local[1], "sport": connection.local[1], "dst": connection.peer[0],
                "dport": connection.peer[1], "traced": traced, "path": path, "sent": info["data_segs_out"],
                "naks": watched.reported, "timeouts": info["total_rto"],
                "resent": info["total_retrans"], "spurious": info["dsack_dups"],
                "waiting_ms": waiting_ms}
