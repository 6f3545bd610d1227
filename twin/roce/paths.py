"""Where a QP's packets go: the NIC discovers its QP's path from the QP's own socket, as a host that
knows its flows' paths does (Xingmai's end-side detection; 007 traces the flows that retransmit).

A discovery sends one TRACE packet per TTL, 1 to MAX_TTL, from the QP's socket (so with its 5-tuple,
which the fabric's ECMP hashes like its data); every switch on the way answers ICMP time-exceeded
from its ingress address, queued on the socket (IP_RECVERR) with the quoted packet, whose PSN
field carries the TTL. Packets that outlive the path reach the peer's NIC, which ignores the
opcode. A QP discovers its path when it connects, and again when it loses packets (a reroute may
have moved it), at most once every RETRACE_S. Multipath QPs have no one path: they are not traced.
"""

from __future__ import annotations

import socket

from twin.roce.wire import TRACE, Header, unpack
from twin.sockopts import report_errors, send, time_exceeded

MAX_TTL = 8  # switches on a path of a 3-tier fabric: 5 (leaf, spine, superspine, spine, leaf)
RETRACE_S = 1.0
ANSWERED_S = 0.1  # a discovery's answers come within milliseconds; until then the last one's stand


class PathDiscovery:
    def __init__(self, sock: socket.socket, qpn: int):
        self.sock, self.qpn = sock, qpn
        self.answers: dict[int, str] = {}  # TTL -> the address of the switch that answered it
        self.previous: dict[int, str] = {}  # the last discovery's, while this one's answers come
        self.started_at: float | None = None
        report_errors(sock)

    def start(self, now: float) -> None:
        """Send a discovery's TTL-limited packets; answers of an earlier one are forgotten."""
        if self.started_at is not None and now - self.started_at < RETRACE_S:
            return
        self.started_at, self.previous, self.answers = now, self.answers or self.previous, {}
        address = self.sock.getpeername()
        for ttl in range(1, MAX_TTL + 1):
            send(self.sock, Header(TRACE, 0, ttl, msg=self.qpn).pack(), address, ttl)

    def read_answers(self) -> None:
        """Take the socket's queued time-exceeded answers (also clears the error a next send would
        otherwise report)."""
        for quoted, offender in time_exceeded(self.sock):
            header = unpack(quoted)
            if header is not None and header.opcode == TRACE and header.msg == self.qpn and 1 <= header.psn <= MAX_TTL:
                self.answers[header.psn] = offender

    def hops(self, now: float) -> dict[str, str] | None:
        """TTL -> answering switch address of the newest discovery answered, as text keys (JSON);
        None until the first one has had time to be answered. Empty: no switch answered (a path
        within one leaf's hosts has none past the leaf, whose TTL 1 answer may be lost)."""
        if self.started_at is None or now - self.started_at < ANSWERED_S and not self.answers and not self.previous:
            return None
        settled = now - self.started_at >= ANSWERED_S
        return {str(ttl): address for ttl, address in sorted((self.answers if settled else self.previous).items())}
