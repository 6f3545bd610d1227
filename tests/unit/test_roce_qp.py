"""The RC queue pair's go-back-N state machine (roce/qp.py) and the multipath QP's selective
repeat (roce/selective.py) on a simulated link with a virtual clock: loss, reordering,
duplicates, NAK, SACK, timeout, retry exhaustion."""

import pytest

from twin.roce.qp import QueuePair, Timers, ib_timeout_s, retry_budget_s
from twin.roce.selective import SelectiveQueuePair
from twin.roce.wire import ACK, DATA, NAK, SACK, Header, sack_bits

PAYLOAD = 1000


class Link:
    """A sends to B, B answers A. `drop(kind, psn, nth)` decides which packets vanish; `swap`
    reorders the next two data packets once."""

    def __init__(self, timers=None, drop=None):
        self.a = QueuePair(1, 2, PAYLOAD, timers or Timers(timeout_s=0.01, retry_cnt=3, ack_every=4))
        self.b = QueuePair(2, 1, PAYLOAD, timers or Timers(timeout_s=0.01, retry_cnt=3, ack_every=4))
        self.drop = drop or (lambda kind, psn, nth: False)
        self.now, self.sent = 0.0, {}
        self.swap_next = False
        self.order = lambda batch: batch  # how the paths deliver a batch (SprayedLink permutes it)

    def deliver(self, limit=8):
        batch = self.order(self.a.transmit(self.now, limit))
        if self.swap_next and len(batch) >= 2:
            batch[0], batch[1] = batch[1], batch[0]
            self.swap_next = False
        for header, piece in batch:
            nth = self.sent[header.psn] = self.sent.get(header.psn, 0) + 1
            if self.drop(DATA, header.psn, nth):
                continue
            controls, _done = self.b.on_data(header, piece, self.now)
            self._answer(controls)
        ack = self.b.poll_ack(self.now)
        if ack:
            self._answer([ack])

    def _answer(self, controls):
        for control in controls:
            if self.drop(control.opcode, control.msg if control.opcode == SACK else control.psn, 1):
                continue  # a SACK is dropped by the PSN it reports arrived
            if control.opcode == SACK:
                self.a.on_sack(control.psn, control.msg, self.now, sack_bits(control))
            else:
                (self.a.on_ack if control.opcode == ACK else self.a.on_nak)(control.psn, self.now)

    def run(self, until, step=0.001):
        while self.now < until and not self.a.error:
            self.deliver()
            self.a.on_timer(self.now)
            self.now += step


def message(n):
    return memoryview(bytes((i * 7) % 251 for i in range(n)))


def test_a_clean_message_arrives_once_and_completes_on_the_ack():
    link = Link()
    data, out = message(10 * PAYLOAD + 17), bytearray(10 * PAYLOAD + 17)
    send, recv = link.a.post_send(data), link.b.post_recv(memoryview(out))
    link.run(0.05)
    assert send.done and recv.done and bytes(out) == bytes(data)
    assert link.a.stats.retrans_packets == 0 and link.b.stats.naks_sent == 0
    assert link.b.stats.acks_sent <= 11 // 4 + 1  # coalesced: every 4th packet and the last


def test_a_lost_packet_makes_the_receiver_nak_once_and_the_sender_go_back_n():
    link = Link(drop=lambda kind, psn, nth: kind == DATA and psn == 3 and nth == 1)
    data, out = message(12 * PAYLOAD), bytearray(12 * PAYLOAD)
    send, recv = link.a.post_send(data), link.b.post_recv(memoryview(out))
    link.run(0.05)
    assert recv.done and send.done and bytes(out) == bytes(data)
    assert link.b.stats.naks_sent == 1 and link.a.stats.naks_received == 1
    # the 4 packets sent after the lost one in its batch (PSN 4..7) were dropped and sent again
    assert link.b.stats.out_of_order == 4
    assert link.a.stats.retrans_packets == 5  # PSN 3..7
    assert link.a.stats.timeouts == 0


def test_reordering_is_a_loss_to_rc():
    link = Link()
    link.swap_next = True
    data, out = message(6 * PAYLOAD), bytearray(6 * PAYLOAD)
    link.a.post_send(data)
    recv = link.b.post_recv(memoryview(out))
    link.run(0.05)
    assert recv.done and bytes(out) == bytes(data)
    # PSN 1 came first: dropped, NAK for 0; then 0 is taken, and 2 finds 1 missing: NAK for 1
    assert link.b.stats.naks_sent == 2 and link.a.stats.retrans_packets >= 2


def test_a_duplicate_is_acknowledged_not_written_twice():
    link = Link()
    data, out = message(2 * PAYLOAD), bytearray(2 * PAYLOAD)
    link.a.post_send(data)
    link.b.post_recv(memoryview(out))
    link.run(0.01)
    assert link.a.transmit(link.now, 1) == []  # nothing left to send
    # replay PSN 0 by hand: the receiver must answer with its cumulative ACK
    controls, done = link.b.on_data(Header(DATA, 2, 0, 0, 0, 2 * PAYLOAD), data[:PAYLOAD], link.now)
    assert [c.opcode for c in controls] == [ACK] and controls[0].psn == 2 and done is None
    assert link.b.stats.duplicates == 1 and bytes(out) == bytes(data)


def test_a_lost_tail_is_recovered_by_the_timer():
    last = 4  # PSN of the message's last packet
    link = Link(drop=lambda kind, psn, nth: kind == DATA and psn == last and nth == 1)
    data, out = message(5 * PAYLOAD), bytearray(5 * PAYLOAD)
    send, recv = link.a.post_send(data), link.b.post_recv(memoryview(out))
    link.run(0.1)
    assert recv.done and send.done and bytes(out) == bytes(data)
    assert link.a.stats.timeouts == 1 and link.b.stats.naks_sent == 0  # nothing followed the loss


def test_a_lost_nak_is_recovered_by_the_timer():
    link = Link(drop=lambda kind, psn, nth: (kind == DATA and psn == 2 and nth == 1) or kind == NAK)
    data, out = message(8 * PAYLOAD), bytearray(8 * PAYLOAD)
    send, recv = link.a.post_send(data), link.b.post_recv(memoryview(out))
    link.run(0.2)
    assert send.done and recv.done and bytes(out) == bytes(data)
    assert link.b.stats.naks_sent == 1 and link.a.stats.naks_received == 0 and link.a.stats.timeouts >= 1


def test_retries_run_out_after_the_doubling_budget_and_fail_every_request():
    timers = Timers(timeout_s=0.01, retry_cnt=3, ack_every=4)
    link = Link(timers, drop=lambda kind, psn, nth: kind == DATA)  # a black hole
    send = link.a.post_send(message(3 * PAYLOAD))
    link.run(1.0)
    assert link.a.error and "retry count exceeded" in link.a.error
    assert send.error == link.a.error and not send.done
    assert link.a.stats.timeouts == 4  # the first timeout and 3 retries
    assert link.now == pytest.approx(0.01 * (1 + 2 + 4 + 8), abs=0.003)  # 10+20+40+80 ms


def test_data_arriving_before_its_receive_is_posted_is_kept():
    link = Link()
    data = message(3 * PAYLOAD)
    link.a.post_send(data)
    link.run(0.02)
    out = bytearray(3 * PAYLOAD)
    recv = link.b.post_recv(memoryview(out))
    assert recv.done and bytes(out) == bytes(data)


def test_ncclish_timer_maths():
    assert ib_timeout_s(20) == pytest.approx(4.295, abs=0.001)  # NCCL_IB_TIMEOUT's default
    assert ib_timeout_s(14) == pytest.approx(0.0671, abs=0.0001)
    assert retry_budget_s(14, 7) == pytest.approx(0.0671 * 255, rel=1e-3)


# --- selective repeat (roce/selective.py): a multipath QP -----------------------------------------
class SprayedLink(Link):
    """As Link, with selective-repeat QPs; `order` permutes each batch of data packets (the
    paths of a sprayed flow deliver them in any order)."""

    def __init__(self, drop=None, order=None, timeout_s=0.01):
        super().__init__(drop=drop)
        timers = Timers(timeout_s=timeout_s, retry_cnt=3, ack_every=4)
        self.a, self.b = SelectiveQueuePair(1, 2, PAYLOAD, timers), SelectiveQueuePair(2, 1, PAYLOAD, timers)
        self.order = order or self.order


def test_reordering_costs_a_multipath_qp_nothing():
    link = SprayedLink(order=lambda batch: batch[::-1])  # every batch of 8 arrives backwards
    size = 40 * PAYLOAD + 5
    data, out = message(size), bytearray(size)
    send, recv = link.a.post_send(data), link.b.post_recv(memoryview(out))
    link.run(0.05)
    assert send.done and recv.done and bytes(out) == bytes(data)
    assert link.a.stats.retrans_packets == 0 and link.a.stats.timeouts == 0
    assert link.b.stats.out_of_order > 0 and link.b.stats.naks_sent == 0


def test_a_lost_packet_is_sent_again_alone():
    link = SprayedLink(drop=lambda kind, psn, nth: kind == DATA and psn == 3 and nth == 1)
    data, out = message(40 * PAYLOAD), bytearray(40 * PAYLOAD)
    send, recv = link.a.post_send(data), link.b.post_recv(memoryview(out))
    link.run(0.1)
    assert send.done and recv.done and bytes(out) == bytes(data)
    assert link.a.stats.retrans_packets == 1  # PSN 3 only: go-back-N would send 3..39 again
    assert link.a.stats.timeouts == 0  # found by the SACKs of the packets after it


def test_a_lost_tail_is_sent_again_by_the_probe_long_before_the_retransmission_timer():
    link = SprayedLink(drop=lambda kind, psn, nth: kind == DATA and psn >= 9 and nth == 1, timeout_s=1.0)
    data, out = message(10 * PAYLOAD), bytearray(10 * PAYLOAD)
    send, recv = link.a.post_send(data), link.b.post_recv(memoryview(out))
    link.run(0.1)  # a tenth of the 1 s timer
    assert send.done and recv.done and bytes(out) == bytes(data)
    assert link.a.stats.timeouts == 0 and link.a.stats.tail_probes == 1 and link.a.stats.retrans_packets == 1
    controls, done = link.b.on_data(Header(DATA, 2, 4, 0, 4 * PAYLOAD, 10 * PAYLOAD), data[:PAYLOAD], link.now)
    assert [c.opcode for c in controls] == [ACK] and done is None and bytes(out) == bytes(data)


def ten_packets_arrive(link) -> None:
    """A ten-packet message over `link`, run for 0.1 s: it arrives whole."""
    data, out = message(10 * PAYLOAD), bytearray(10 * PAYLOAD)
    send, recv = link.a.post_send(data), link.b.post_recv(memoryview(out))
    link.run(0.1)
    assert send.done and recv.done and bytes(out) == bytes(data)


def test_a_probe_sends_the_whole_unacknowledged_tail_at_once():
    link = SprayedLink(drop=lambda kind, psn, nth: kind == DATA and psn >= 7 and nth == 1, timeout_s=1.0)
    ten_packets_arrive(link)
    # one probe: 7, 8 and 9 sent again, no timeout
    assert link.a.stats.tail_probes == 1 and link.a.stats.retrans_packets == 3 and link.a.stats.timeouts == 0


def test_a_tail_whose_probe_is_lost_too_waits_for_the_timer():
    link = SprayedLink(drop=lambda kind, psn, nth: kind == DATA and psn >= 9 and nth <= 2)
    ten_packets_arrive(link)
    assert link.a.stats.tail_probes == 1 and link.a.stats.timeouts == 1 and link.a.stats.retrans_packets == 2


def test_messages_complete_whatever_order_their_packets_take():
    import random

    shuffle = random.Random(7)
    link = SprayedLink(order=lambda batch: shuffle.sample(batch, len(batch)),
                       drop=lambda kind, psn, nth: kind == DATA and nth == 1 and psn % 11 == 5)
    sizes = [3 * PAYLOAD + 1, 1, 17 * PAYLOAD]
    sends, outs, recvs = [], [], []
    for size in sizes:
        out = bytearray(size)
        sends.append(link.a.post_send(message(size)))
        recvs.append(link.b.post_recv(memoryview(out)))
        outs.append(out)
    link.run(0.2)
    assert all(s.done for s in sends) and all(r.done for r in recvs)
    assert [bytes(o) for o in outs] == [bytes(message(n)) for n in sizes]
    assert link.a.stats.retrans_packets >= 2 and not link.a.error


def test_random_loss_and_reordering_lose_no_byte_and_need_no_timer_when_probes_get_through():
    import random

    rng = random.Random(3)
    link = SprayedLink(order=lambda batch: rng.sample(batch, len(batch)), timeout_s=1.0,
                       drop=lambda kind, psn, nth: kind == DATA and nth <= 2 and psn != 199 and rng.random() < 0.05)
    data, out = message(200 * PAYLOAD), bytearray(200 * PAYLOAD)
    send, recv = link.a.post_send(data), link.b.post_recv(memoryview(out))
    link.run(0.5)
    assert send.done and recv.done and bytes(out) == bytes(data)
    assert link.a.stats.timeouts == 0 and link.a.stats.retrans_packets >= 5


def test_a_gap_filled_late_does_not_stretch_the_round_trip():
    """A cumulative ACK that arrives when a gap is filled covers packets SACKed long before: timing
    them would inflate the round trip, and the probe and retransmission timeouts with it."""
    link = SprayedLink(drop=lambda kind, psn, nth: kind == DATA and psn == 0 and link.now < 0.15, timeout_s=0.05)
    data, out = message(40 * PAYLOAD), bytearray(40 * PAYLOAD)
    link.a.post_send(data)
    link.b.post_recv(memoryview(out))
    link.run(0.5)  # PSN 0 gets through at 0.15 s at the earliest, the rest at once
    assert bytes(out) == bytes(data)
    assert link.a.srtt is not None and link.a.srtt < 0.01, link.a.srtt  # the link's round trip is 0-1 ms


@pytest.mark.parametrize("repeated", [True, False])
def test_sacks_lost_on_the_way_back_cost_no_resend_of_what_arrived(repeated):
    """Half the SACKs lost (a way back through a failed downlink) while a gap stays open: every
    arrival is in the bitmaps of the SACKs after it, so the sender resends only the lost packet.
    Without the bitmap (`repeated` False: the SACK's bits not read) the packets whose SACKs were
    lost look lost too and are sent again."""
    link = SprayedLink(order=lambda batch: batch[::-1], timeout_s=1.0,
                       drop=lambda kind, psn, nth: (kind == DATA and psn == 3 and nth <= 2) or
                       (kind == SACK and psn % 2 == 0))
    if not repeated:
        on_sack = link.a.on_sack
        link.a.on_sack = lambda cumulative, psn, now, bits: on_sack(cumulative, psn, now)
    data, out = message(80 * PAYLOAD), bytearray(80 * PAYLOAD)
    send, recv = link.a.post_send(data), link.b.post_recv(memoryview(out))
    link.run(0.2)
    assert send.done and recv.done and bytes(out) == bytes(data)
    if repeated:
        assert link.b.stats.duplicates == 0 and link.a.stats.retrans_packets == 2, link.a.stats  # PSN 3, twice
    else:
        assert link.b.stats.duplicates > 0, link.b.stats
