"""A gloo rank's TCP connections as transport state (collectives/tcp_state.py): the kernel's TCP_INFO
read through the rank's own descriptors, the raw probes that discover a connection's path and the
answers matched back to it, and when a connection waits and discovers again."""

import socket
import struct

import pytest

from twin.collectives import tcp_state
from twin.collectives.tcp_state import (
    ICMP_TIME_EXCEEDED,
    IP,
    Connection,
    TcpState,
    checksum,
    own_connections,
    probe_segment,
    quoted_probe,
)
from twin.roce.paths import STALLED_S

CONNECTION = Connection(("10.1.0.2", 45000), ("10.2.0.2", 60123))


def answer(packet: bytes, offender: str, kind: int = ICMP_TIME_EXCEEDED) -> bytes:
    """A switch's ICMP answer quoting `packet`, as a raw ICMP socket reads it (IP header first)."""
    icmp = struct.pack("!BBHI", kind, 0, 0, 0) + packet[:28]
    outer = IP.pack(0x45, 0xC0, IP.size + len(icmp), 1, 0, 64, socket.IPPROTO_ICMP, 0,
                    socket.inet_aton(offender), socket.inet_aton(CONNECTION.local[0]))
    return outer + icmp


@pytest.fixture
def connected():
    """A loopback TCP connection that has carried data both ways."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    client.sendall(b"x" * 10000)
    accepted.recv(100000)
    accepted.sendall(b"y" * 100)
    client.recv(1000)
    yield client, accepted
    for sock in (client, accepted, server):
        sock.close()


def test_a_probe_carries_the_connections_5_tuple_and_a_valid_checksum():
    packet = probe_segment(CONNECTION, 3)
    ttl, protocol, src, dst = packet[8], packet[9], socket.inet_ntoa(packet[12:16]), socket.inet_ntoa(packet[16:20])
    assert (ttl, protocol, src, dst) == (3, socket.IPPROTO_TCP, *[CONNECTION.local[0], CONNECTION.peer[0]])
    assert struct.unpack("!HH", packet[20:24]) == (CONNECTION.local[1], CONNECTION.peer[1])
    pseudo = struct.pack("!4s4sBBH", packet[12:16], packet[16:20], 0, socket.IPPROTO_TCP, len(packet) - 20)
    assert checksum(pseudo + packet[20:]) == 0  # a segment with its checksum sums to zero


def test_an_answer_names_the_connection_its_ttl_and_the_switch():
    assert quoted_probe(answer(probe_segment(CONNECTION, 4), "10.9.9.1")) == (CONNECTION, 4, "10.9.9.1")


def test_answers_to_anything_else_are_not_the_probes():
    segment = bytearray(probe_segment(CONNECTION, 4))
    segment[4:6] = struct.pack("!H", 17)  # the kernel TCP's own segment: an ordinary IP id
    assert quoted_probe(answer(bytes(segment), "10.9.9.1")) is None
    assert quoted_probe(answer(probe_segment(CONNECTION, 4), "10.9.9.1", kind=3)) is None  # unreachable
    assert quoted_probe(answer(probe_segment(CONNECTION, 4), "10.9.9.1")[:40]) is None  # cut short


def test_own_connections_reads_the_kernels_counters_and_leaves_the_sockets_open(connected):
    client, accepted = connected
    found = dict(own_connections())
    mine = found[Connection(client.getsockname(), client.getpeername())]
    assert mine["data_segs_out"] >= 1 and mine["bytes_acked"] >= 10000 and mine["total_retrans"] == 0
    assert Connection(accepted.getsockname(), accepted.getpeername()) in found
    client.sendall(b"still open")  # read through its descriptor, not taken over
    assert accepted.recv(100) == b"still open"


class Tracer:
    """Records the probes a discovery sends; answers what the test says."""

    def __init__(self):
        self.probes: list[tuple[Connection, int]] = []
        self.queued: list = []

    def probe(self, connection, ttl):
        self.probes.append((connection, ttl))

    def answers(self):
        queued, self.queued = self.queued, []
        return queued


def test_a_connection_is_traced_to_the_switch_before_its_peer_and_discovers_again_when_it_waits(monkeypatch):
    info = {"state": 1, "unacked": 0, "total_retrans": 0, "bytes_acked": 1000, "data_segs_out": 10, "total_rto": 0,
            "dsack_dups": 0}
    monkeypatch.setattr(tcp_state, "own_connections", lambda: [(CONNECTION, dict(info))])
    clock = [100.0]
    monkeypatch.setattr(tcp_state.time, "monotonic", lambda: clock[0])
    tracer = Tracer()
    state = TcpState(tracer, lambda peer: {"10.2.0.2": 3}[peer])
    first = state.states()[0]
    assert [ttl for _, ttl in tracer.probes] == [1, 2, 3]  # never a TTL that would reach the peer's TCP
    assert first["traced"] == 0 and first["waiting_ms"] == 0  # answers not in yet
    tracer.queued = [(CONNECTION, 1, "10.0.0.1"), (CONNECTION, 3, "10.0.0.3")]
    clock[0] += 5  # its answers are in by now
    assert state.states()[0]["path"] == {"1": "10.0.0.1", "3": "10.0.0.3"}
    info.update(unacked=4)  # data outstanding, and the acknowledged bytes stop moving
    assert state.states()[0]["waiting_ms"] == 0
    clock[0] += STALLED_S
    waited = state.states()[0]
    assert waited["waiting_ms"] == round(STALLED_S * 1000) and len(tracer.probes) == 6  # a wait: discovered again
    info.update(bytes_acked=5000)  # acknowledged: the wait is over
    clock[0] += 0.05
    assert state.states()[0]["waiting_ms"] == 0


def test_a_loss_counts_once_two_reads_saw_it_and_a_retransmission_the_peer_had_is_none(monkeypatch):
    """A tail loss probe resends a healthy connection's last segment and the peer's D-SACK says it
    was a duplicate an RTT later: a read between the two must not count it. A timeout is one loss."""
    info = {"state": 1, "unacked": 1, "total_retrans": 0, "bytes_acked": 1, "data_segs_out": 10, "total_rto": 0,
            "dsack_dups": 0}
    monkeypatch.setattr(tcp_state, "own_connections", lambda: [(CONNECTION, info)])
    state = TcpState(Tracer(), lambda peer: 1)
    naks = []
    for retransmitted, duplicates, timeouts in ((0, 0, 0), (1, 0, 0), (1, 1, 0), (3, 1, 0), (3, 1, 0), (5, 1, 1),
                                                (5, 1, 1)):
        info.update(total_retrans=retransmitted, dsack_dups=duplicates, total_rto=timeouts)
        reported = state.states()[0]
        naks.append(reported["naks"])
    assert naks == [0, 0, 0, 0, 2, 2, 3]  # the probe never; two losses a read late; the timeout's resend not
    assert (reported["timeouts"], reported["resent"], reported["spurious"]) == (1, 5, 1)
