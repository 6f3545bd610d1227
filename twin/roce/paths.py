"""Where a QP's packets go: the NIC discovers its QP's path from the QP's own socket, as a host that
knows its flows' paths does (Xingmai's end-side detection; 007 traces the flows that retransmit).

A discovery sends one TRACE packet per TTL, 1 to MAX_TTL, from the QP's socket (so with its 5-tuple,
which the fabric's ECMP hashes like its data); every switch on the way answers ICMP time-exceeded
from its ingress address, queued on the socket (IP_RECVERR) with the quoted packet, whose PSN
field carries the TTL. Packets that outlive the path reach the peer's NIC, which ignores the
opcode. A QP discovers its path when it connects, and again when it loses packets (a reroute may
have moved it) or its outstanding packets wait STALLED_S, at most once every RETRACE_S. Multipath
QPs have no one path: they are not traced.
"""

from __future__ import annotations

import socket

from twin.roce.wire import TRACE, Header, unpack
from twin.sockopts import report_errors, send, time_exceeded

MAX_TTL = 8  # switches on a path of a 3-tier fabric: 5 (leaf, spine, superspine, spine, leaf)
RETRACE_S = 1.0
ANSWERED_S = 0.1  # a discovery's answers come within milliseconds; until then the last one's stand
# A QP whose outstanding packets wait this long for an acknowledgement is stalled (its tail, or
# everything, lost): it discovers its path again, and transport-state counts the wait as a loss.
# 100 round trips of a busy twin's path (about 1 ms at 100-200 Mbit/s), far beyond a healthy
# lossless fabric's longest pause (2.2 ms measured, docs/benchmarks.md).
STALLED_S = 0.1


class Discovery:
    """One flow's path discoveries: when to start one, and the newest whose answers are in. A
    subclass sends a discovery's TTL-limited packets (`probe`) and takes its answers (`answer`)."""

    def __init__(self, ttls: int = MAX_TTL):
        self.ttls = ttls  # the TTLs a discovery sends, 1 to this
        self.round = 0  # discoveries started
        self.answers: dict[int, str] = {}  # this one's: TTL -> the address of the switch that answered it
        self.previous: tuple[int, dict[int, str]] = (0, {})  # the one before: its round and answers
        self.started_at: float | None = None

    def start(self, now: float) -> None:
        """Send a discovery's TTL-limited packets, at most once every RETRACE_S."""
        if self.started_at is not None and now - self.started_at < RETRACE_S:
            return
        if self.round:
            self.previous = (self.round, self.answers)
        self.round, self.answers, self.started_at = self.round + 1, {}, now
        for ttl in range(1, self.ttls + 1):
            self.probe(ttl)

    def probe(self, ttl: int) -> None:
        raise NotImplementedError

    def answer(self, ttl: int, offender: str) -> None:
        if 1 <= ttl <= self.ttls:
            self.answers[ttl] = offender

    def discovered(self, now: float) -> tuple[int, dict[str, str]] | None:
        """The newest discovery whose answers are in: its round and TTL -> answering switch address
        (text keys: the report is JSON); None before the first. No answer for a TTL: none came (a
        path within one leaf's hosts has none past the leaf; a lossy link silences those past it)."""
        if self.started_at is not None and now - self.started_at >= ANSWERED_S:
            number, answers = self.round, self.answers
        else:
            number, answers = self.previous
        return (number, {str(ttl): address for ttl, address in sorted(answers.items())}) if number else None


class PathDiscovery(Discovery):
    """A QP's: TRACE packets from the socket it sends from, to its peer, answered on the socket's
    error queue."""

    def __init__(self, sock: socket.socket, qpn: int, peer: tuple[str, int]):
        super().__init__()
        self.sock, self.qpn, self.peer = sock, qpn, peer
        report_errors(sock)

    def moved(self, sock: socket.socket, now: float) -> None:
        """The QP sends from another socket now (another source port: another path): discover
        that path at once, whenever the last discovery was."""
        self.sock = sock
        report_errors(sock)
        self.started_at = None
        self.start(now)

    def probe(self, ttl: int) -> None:
        send(self.sock, Header(TRACE, 0, ttl, msg=self.qpn).pack(), self.peer, ttl)

    def read_answers(self) -> None:
        """Take the socket's queued time-exceeded answers (also clears the error a next send would
        otherwise report)."""
        for quoted, offender in time_exceeded(self.sock):
            header = unpack(quoted)
            if header is not None and header.opcode == TRACE and header.msg == self.qpn:
                self.answer(header.psn, offender)
