"""A reliable-connection queue pair, as RoCEv2 NICs run it (the IB transport's RC service), on
the twin's UDP packets. Pure: packets and the clock come in, packets go out; nic.py moves them.

Send side: messages are cut into MTU-sized packets numbered by one packet sequence number (PSN)
running across messages; everything from the oldest unacknowledged PSN (`base`) is in flight.
- An ACK (cumulative) completes what it covers and restarts the retransmission timer.
- A NAK (sequence error) says which PSN the receiver expects: the sender goes back to it and
  sends everything again from there (go-back-N), however much had followed it.
- The retransmission timer: when nothing is acknowledged for `timeout_s` the sender goes back to
  `base` and doubles the timer; after `retry_cnt` retries without progress the QP fails
  ("retry count exceeded"), as NCCL reports it, and every pending request with it. The first
  timeout is never shorter than the round trips measured on the QP allow (srtt + 4 rttvar, as
  TCP and a NIC's adaptive retransmission do): the twin's round trips are those of a line rate
  scaled 2000 times down (tens of ms where the fabric has microseconds), and a timer shorter
  than them would fire on a healthy fabric.
Receive side: only the next expected PSN is accepted; a later one is dropped and answered with
one NAK (no more until the expected packet arrives); an earlier one (a duplicate) is answered
with an ACK. In-order packets are acknowledged every `ack_every` packets, at the end of every
message, or `ack_delay_s` after the first unacknowledged one (ACK coalescing).

Timers follow NCCL's knobs: ib_timeout (NCCL_IB_TIMEOUT, default 20) gives the first timeout,
4.096 us x 2^ib_timeout (x time_scale), retry_cnt (NCCL_IB_RETRY_CNT, default 7) the retries.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from twin.roce.wire import ACK, DATA, LAST, NAK, Header

IB_TIME_UNIT_S = 4.096e-6
DEFAULT_IB_TIMEOUT = 20
DEFAULT_RETRY_CNT = 7


def ib_timeout_s(ib_timeout: int, time_scale: float = 1.0) -> float:
    """The local ACK timeout InfiniBand verbs define: 4.096 us x 2^ib_timeout."""
    return IB_TIME_UNIT_S * (1 << ib_timeout) * time_scale


def retry_budget_s(ib_timeout: int, retry_cnt: int, time_scale: float = 1.0) -> float:
    """How long after its last ACK a QP with no answer fails: the first timeout, then retry_cnt
    more, each twice the one before."""
    return ib_timeout_s(ib_timeout, time_scale) * ((1 << (retry_cnt + 1)) - 1)


def last_retry_s(ib_timeout: int, retry_cnt: int, time_scale: float = 1.0) -> float:
    """When a QP with no answer sends for the last time: an outage must end before it (the
    rest of the budget is waiting for that retry's ACK)."""
    return ib_timeout_s(ib_timeout, time_scale) * ((1 << retry_cnt) - 1)


@dataclass(frozen=True)
class Timers:
    timeout_s: float = ib_timeout_s(DEFAULT_IB_TIMEOUT)
    retry_cnt: int = DEFAULT_RETRY_CNT
    ack_every: int = 16
    ack_delay_s: float = 0.0005


@dataclass
class Stats:
    data_packets: int = 0
    data_bytes: int = 0
    retrans_packets: int = 0
    retrans_bytes: int = 0
    naks_sent: int = 0
    naks_received: int = 0
    timeouts: int = 0
    out_of_order: int = 0  # packets after a gap: dropped (RC) or kept and SACKed (multipath)
    duplicates: int = 0
    acks_sent: int = 0
    ecn_marked: int = 0  # data packets that arrived marked Congestion Experienced
    cnps_sent: int = 0
    cnps_received: int = 0  # each one a rate cut (DCQCN)
    tail_probes: int = 0  # multipath QPs: unacknowledged packets sent again after a probe timeout
    dodges: int = 0  # moves to another path offset (the NIC's `path_offsets`)

    def add(self, other: Stats) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)


# What ranks report per iteration (and the report sums per fault window).
REPORTED_FIELDS = ("retrans_bytes", "retrans_packets", "naks_sent", "naks_received", "timeouts", "qp_errors",
                   "ecn_marked", "cnps_sent", "cnps_received", "out_of_order", "tail_probes", "dodges")


class TransportError(RuntimeError):
    """The QP went to the error state: NCCL's 'transport retry counter exceeded'."""


@dataclass
class SendRequest:
    qpn: int
    msg: int
    data: memoryview
    first_psn: int
    packets: int
    done: bool = False
    error: str | None = None


@dataclass
class RecvRequest:
    qpn: int
    msg: int
    buffer: memoryview | None = None  # None until posted: arriving data waits in `staged`
    staged: bytearray | None = None
    length: int | None = None
    received: int = 0  # bytes placed so far (complete at the message's length, in any order)
    done: bool = False
    error: str | None = None


@dataclass
class QueuePair:
    local: int  # this side's QP number
    remote: int  # the peer's QP number: what our packets carry
    payload: int  # message bytes per packet
    timers: Timers = field(default_factory=Timers)
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self):
        # send side
        self.sends: deque[SendRequest] = deque()
        self.base = self.next_psn = self.end_psn = self.high_psn = 0
        self.next_send_msg = 0
        self.retries = 0
        self.rto = self.timers.timeout_s
        self.deadline: float | None = None
        self.progress_at = 0.0  # when the oldest unacknowledged packet last moved (an ACK, or the first send)
        self.error: str | None = None
        self.finished = 0  # requests completed or failed so far: what the collective's thread waits for
        self.sent_at: dict[int, float] = {}  # first transmissions not yet acknowledged: round trip samples
        self.srtt: float | None = None
        self.rttvar = 0.0
        # receive side
        self.expected = 0
        self.nak_for: int | None = None
        self.unacked = 0
        self.ack_due: float | None = None
        self.recvs: dict[int, RecvRequest] = {}
        self.next_recv_msg = 0

    # --- posting (the collective) ------------------------------------------------------------
    def post_send(self, data: memoryview) -> SendRequest:
        packets = max(1, -(-len(data) // self.payload))
        request = SendRequest(self.local, self.next_send_msg, data, self.end_psn, packets)
        self.next_send_msg += 1
        self.end_psn += packets
        self.sends.append(request)
        if self.error:
            request.error = self.error
        return request

    def post_recv(self, buffer: memoryview) -> RecvRequest:
        msg = self.next_recv_msg
        self.next_recv_msg += 1
        request = self.recvs.setdefault(msg, RecvRequest(self.local, msg))
        request.buffer = buffer
        if request.staged is not None:  # it arrived (in part) before it was posted
            buffer[:len(request.staged)] = request.staged
            request.staged = None
        if request.done:
            self.recvs.pop(msg)
        if self.error:
            request.error = self.error
        return request

    @property
    def sending(self) -> bool:
        return self.error is None and self.next_psn < self.end_psn

    # --- send side ------------------------------------------------------------------------------
    def peek(self, limit: int) -> list[tuple[Header, memoryview]]:
        """Up to `limit` packets to put on the wire next, from `next_psn` on (commit() them once
        they are sent: a full socket may refuse them)."""
        out = []
        if self.error:
            return out
        wrs = iter(self.sends)
        request = next(wrs, None)
        psn = self.next_psn
        while psn < self.end_psn and len(out) < limit:
            while request is not None and psn >= request.first_psn + request.packets:
                request = next(wrs, None)
            out.append(self._packet(request, psn))
            psn += 1
        return out

    def _packet(self, request: SendRequest, psn: int) -> tuple[Header, memoryview]:
        index = psn - request.first_psn
        offset = index * self.payload
        piece = request.data[offset:offset + self.payload]
        last = LAST if index == request.packets - 1 else 0
        return Header(DATA, self.remote, psn, request.msg, offset, len(request.data), last), piece

    def commit(self, packets: list[tuple[Header, memoryview]], now: float) -> None:
        """These packets (from peek) went on the wire."""
        for header, piece in packets:
            if header.psn < self.high_psn:
                self.stats.retrans_packets += 1
                self.stats.retrans_bytes += len(piece)
                self.sent_at.pop(header.psn, None)  # Karn: a resent packet's ACK times nothing
            else:
                self.sent_at[header.psn] = now
            self.stats.data_packets += 1
            self.stats.data_bytes += len(piece)
        if packets:
            self.next_psn = packets[-1][0].psn + 1
            self.high_psn = max(self.high_psn, self.next_psn)
            if self.deadline is None:
                self.deadline = now + self.rto
                self.progress_at = now

    def transmit(self, now: float, limit: int) -> list[tuple[Header, memoryview]]:
        """peek() and commit(): what a socket that never refuses would send."""
        packets = self.peek(limit)
        self.commit(packets, now)
        return packets

    def on_ack(self, psn: int, now: float) -> list[SendRequest]:
        """Everything below `psn` arrived; returns the requests it completed."""
        done = []
        if psn > self.base:
            sample = self.sent_at.get(psn - 1)
            if sample is not None:
                self._measure(now - sample)
            for acked in range(self.base, min(psn, self.high_psn)):
                self.sent_at.pop(acked, None)
            self.base = min(psn, self.high_psn)
            while self.sends and self.sends[0].first_psn + self.sends[0].packets <= self.base:
                request = self.sends.popleft()
                request.done = True
                done.append(request)
                self.finished += 1
            self.retries, self.rto = 0, self.first_timeout()
            self.progress_at = now
            self.next_psn = max(self.next_psn, self.base)
            self.deadline = now + self.rto if self.base < self.high_psn else None
        return done

    def waiting_s(self, now: float) -> float:
        """How long packets have been outstanding with no acknowledgement moving (0: none outstanding):
        a QP whose packets or ACKs a link drops waits here until its timer fires."""
        return max(0.0, now - self.progress_at) if self.base < self.high_psn and self.error is None else 0.0

    def _measure(self, rtt: float) -> None:
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def first_timeout(self) -> float:
        """The configured timeout, or what the measured round trips need, whichever is longer."""
        if self.srtt is None:
            return self.timers.timeout_s
        return max(self.timers.timeout_s, self.srtt + 4 * self.rttvar)

    def on_nak(self, psn: int, now: float) -> list[SendRequest]:
        """The receiver expects `psn`: what precedes it arrived; go back to it."""
        self.stats.naks_received += 1
        progress = psn > self.base
        done = self.on_ack(psn, now)
        if not progress:
            self._retry("NAK")
        if self.error is None and self.next_psn > psn:
            self.next_psn = psn
        return done

    def on_timer(self, now: float) -> None:
        if self.deadline is None or now < self.deadline or self.error:
            return
        if self.base >= self.high_psn:
            self.deadline = None
            return
        self.stats.timeouts += 1
        self._retry("timeout")
        if self.error is None:
            self.rto *= 2
            self._resend_unacknowledged()
            self.deadline = now + self.rto

    def repath(self) -> None:
        """The NIC moved the QP to another path (dodging): what is outstanding went down the old
        one, which lost packets; send it again on the new one now, not at the timer's next
        firing. Not a retry: the timer and its count stand."""
        self.next_psn = min(self.next_psn, self.base)

    def _resend_unacknowledged(self) -> None:
        """After a timeout: go back to the oldest unacknowledged packet (go-back-N)."""
        self.next_psn = self.base

    def _retry(self, why: str) -> None:
        self.retries += 1
        if self.retries > self.timers.retry_cnt:
            self.fail(f"transport retry count exceeded ({self.timers.retry_cnt} retries, last after a {why}; "
                      f"{self.high_psn - self.base} packets unacknowledged)")

    def fail(self, reason: str) -> None:
        self.error = reason
        self.finished += 1
        self.deadline = None
        for request in self.sends:
            request.error = reason
        for request in self.recvs.values():
            request.error = reason

    # --- receive side --------------------------------------------------------------------------
    def on_data(self, header: Header, payload: memoryview, now: float) -> tuple[list[Header], RecvRequest | None]:
        """Returns the control packets to send back, and the receive request it completed."""
        if header.psn > self.expected:
            self.stats.out_of_order += 1
            if self.nak_for != self.expected:
                self.nak_for = self.expected
                self.stats.naks_sent += 1
                return [Header(NAK, self.remote, self.expected)], None
            return [], None
        if header.psn < self.expected:
            self.stats.duplicates += 1
            return [self._ack()], None
        self.expected += 1
        self.nak_for = None
        completed = self._place(header, payload)
        self.unacked += 1
        if header.flags & LAST or self.unacked >= self.timers.ack_every:
            return [self._ack()], completed
        if self.ack_due is None:
            self.ack_due = now + self.timers.ack_delay_s
        return [], completed

    def _place(self, header: Header, payload: memoryview) -> RecvRequest | None:
        """Write a packet's payload where its header says; returns the receive request it
        completed (all of the message's bytes in, and the request posted)."""
        request = self.recvs.get(header.msg)
        if request is None:
            request = self.recvs[header.msg] = RecvRequest(self.local, header.msg)
        target = request.buffer
        if target is None:
            if request.staged is None:
                request.staged = bytearray(header.msg_len)
            target = memoryview(request.staged)
        target[header.offset:header.offset + len(payload)] = payload
        request.received += len(payload)
        if request.received < header.msg_len:
            return None
        request.length, request.done = header.msg_len, True
        self.finished += 1
        if request.buffer is None:
            return None
        self.recvs.pop(header.msg)
        return request

    def poll_ack(self, now: float) -> Header | None:
        """The coalesced ACK, once its delay is up."""
        if self.ack_due is not None and now >= self.ack_due:
            return self._ack()
        return None

    def _ack(self) -> Header:
        self.unacked, self.ack_due = 0, None
        self.stats.acks_sent += 1
        return Header(ACK, self.remote, self.expected)

    def next_deadline(self) -> float | None:
        times = [t for t in (self.deadline, self.ack_due) if t is not None]
        return min(times) if times else None
