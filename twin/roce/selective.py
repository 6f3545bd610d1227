"""Selective repeat for a queue pair whose packets take many paths (`multipath: true`): they
arrive out of order, and RC's go-back-N (qp.py) would take every overtaken packet for a loss and
send everything after it again. As Ultra Ethernet's reliable unordered delivery and IRN do:

Receive side: a packet within RECEIVE_WINDOW of the next expected PSN is written into its message
at once (its header says where) and remembered; the cumulative ACK moves over what has arrived
without a gap. A packet beyond a gap is answered by a SACK: the cumulative PSN, the PSN that
arrived, and which of the SACK_BITS PSNs below it have arrived too (a bitmap, as Ultra Ethernet's
SACK carries): every arrival is told by many SACKs, so one lost on the way back (a failed link
below a spine the ACKs were sprayed to) does not make its packets look lost. With one PSN per
SACK, a downlink failure on the way back made the sender resend some 300 packets that had arrived
in the 0.2 s until routing withdrew it (bench/uplink_downlink.py). A message completes when all
of its bytes are in, in whatever order they came.

Send side: a packet acknowledged either way is never sent again. A gap is taken for a loss, and
its packet sent once more, when a packet sent REORDER_PACKETS or more after it has been SACKed:
the paths of a fabric differ by their queues, and a packet overtaken by that many is not late but
lost (at the twin's rates a queue at XOFF holds a dozen jumbo frames). A loss among a message's
last packets has too few packets after it to be found so: when nothing has been acknowledged
for a probe timeout (twice the smoothed round trip, at least PROBE_MIN_S), every packet not yet
acknowledged is sent once more (a tail loss probe, after TCP's RFC 8985), where NCCL's
ib_timeout would leave them to a timer of seconds. Sending only the last one, as TCP does, and
taking the gaps its SACK shows for lost, kept 0.18-0.30 of the healthy busbw under a 1 % drop
with 2-3 timeouts of 4.3 s per run; sending all kept 0.99-1.03 with none, at the price of about 1 % of
packets sent twice when a probe fires on a healthy fabric (a paced or paused sender;
docs/benchmarks.md). The timer still sends again every packet not yet acknowledged, with RC's
backoff and retry budget.
"""

from __future__ import annotations

from twin.roce.qp import QueuePair, RecvRequest, SendRequest
from twin.roce.wire import LAST, SACK_BITS, Header, sack

REORDER_PACKETS = 16
RECEIVE_WINDOW = 1 << 14  # PSNs beyond the expected one the receiver keeps; later ones are dropped
PROBE_MIN_S = 0.005  # the shortest probe timeout: above the ACK delay and a few frames' queueing


class SelectiveQueuePair(QueuePair):
    def __post_init__(self):
        super().__post_init__()
        self.sacked: set[int] = set()  # send side: PSNs at or above base the receiver has
        self.highest_sacked = -1
        self.scanned = 0  # PSNs below this were weighed for loss against the SACKs
        self.lost: dict[int, None] = {}  # PSNs to send again, oldest first
        self.arrived: set[int] = set()  # receive side: PSNs beyond `expected` that are in
        self.probe_at: float | None = None  # the tail loss probe's time (None: none armed)

    @property
    def sending(self) -> bool:
        return self.error is None and (bool(self.lost) or self.next_psn < self.end_psn)

    # --- send side ------------------------------------------------------------------------------
    def peek(self, limit: int) -> list[tuple[Header, memoryview]]:
        if self.error:
            return []
        out = [self._packet(self._request(psn), psn) for psn in list(self.lost)[:limit]]
        return out + super().peek(limit - len(out))

    def _request(self, psn: int) -> SendRequest:
        return next(r for r in self.sends if r.first_psn <= psn < r.first_psn + r.packets)

    def commit(self, packets: list[tuple[Header, memoryview]], now: float) -> None:
        before = self.next_psn
        for header, _piece in packets:
            self.lost.pop(header.psn, None)
        super().commit(packets, now)
        # RC's commit moves next_psn to the last packet sent, here perhaps a resent one
        self.next_psn = max([before] + [h.psn + 1 for h, _piece in packets if h.psn >= before])
        self.high_psn = max(self.high_psn, self.next_psn)
        if packets and self.probe_at is None:
            self.probe_at = now + self.probe_timeout()

    def probe_timeout(self) -> float:
        return max(PROBE_MIN_S, 2 * self.srtt) if self.srtt is not None else self.first_timeout()

    def on_ack(self, psn: int, now: float) -> list[SendRequest]:
        if psn > self.base:
            self.probe_at = now + self.probe_timeout() if psn < self.high_psn else None
        done = super().on_ack(psn, now)
        if self.sacked and min(self.sacked) < self.base:
            self.sacked = {p for p in self.sacked if p >= self.base}
        for stale in [p for p in self.lost if p < self.base]:
            del self.lost[stale]
        return done

    def on_sack(self, cumulative: int, psn: int, now: float, bits: int = 0) -> list[SendRequest]:
        """Everything below `cumulative` arrived, `psn` too, and psn - 1 - i for every bit i set."""
        done = self.on_ack(cumulative, now)
        if self.base <= psn < self.high_psn and psn not in self.sacked:
            # A round trip from this packet itself; and none later from the cumulative ACK that
            # covers it, which comes only when the gaps before it are filled.
            sample = self.sent_at.get(psn)  # _sacked forgets it
            if sample is not None:
                self._measure(now - sample)
            self.probe_at = now + self.probe_timeout()
            self._sacked(psn)
        while bits:  # arrivals whose own SACKs this one repeats (no round trip from them: older)
            below = psn - bits.bit_length()
            bits &= ~(1 << (bits.bit_length() - 1))
            if self.base <= below < self.high_psn and below not in self.sacked:
                self._sacked(below)
        if self.highest_sacked >= 0:
            overtaken = self.highest_sacked - REORDER_PACKETS + 1
            for gap in range(max(self.base, self.scanned), overtaken):
                if gap not in self.sacked:
                    self.lost[gap] = None
            self.scanned = max(self.scanned, overtaken)
        return done

    def _sacked(self, psn: int) -> None:
        self.sacked.add(psn)
        self.lost.pop(psn, None)
        self.sent_at.pop(psn, None)
        self.highest_sacked = max(self.highest_sacked, psn)

    def on_timer(self, now: float) -> None:
        if self.probe_at is not None and now >= self.probe_at and not self.error:
            self.probe_at = None  # one probe until something is acknowledged again
            if self.base < self.high_psn:
                self.stats.tail_probes += 1
                self._resend_unacknowledged()
        super().on_timer(now)

    def _resend_unacknowledged(self) -> None:
        """Every packet not acknowledged either way, once more (not go-back-N)."""
        for psn in range(self.base, self.high_psn):
            if psn not in self.sacked:
                self.lost[psn] = None

    def next_deadline(self) -> float | None:
        times = [t for t in (super().next_deadline(), self.probe_at) if t is not None]
        return min(times) if times else None

    # --- receive side ---------------------------------------------------------------------------
    def on_data(self, header: Header, payload: memoryview, now: float) -> tuple[list[Header], RecvRequest | None]:
        psn = header.psn
        if psn < self.expected or psn in self.arrived:
            self.stats.duplicates += 1
            return [self._ack()], None
        if psn >= self.expected + RECEIVE_WINDOW:
            self.stats.out_of_order += 1  # beyond what the receiver keeps: dropped, sent again later
            return [], None
        completed = self._place(header, payload)
        if psn != self.expected:
            self.arrived.add(psn)
            self.stats.out_of_order += 1
            self.stats.acks_sent += 1
            bits = sum(1 << i for i in range(min(SACK_BITS, psn - self.expected)) if psn - 1 - i in self.arrived)
            return [sack(self.remote, self.expected, psn, bits)], completed
        self.expected += 1
        while self.expected in self.arrived:
            self.arrived.remove(self.expected)
            self.expected += 1
        self.unacked += 1
        if completed is not None or header.flags & LAST or self.unacked >= self.timers.ack_every:
            return [self._ack()], completed
        if self.ack_due is None:
            self.ack_due = now + self.timers.ack_delay_s
        return [], completed
