"""The BFD data plane's pure parts: FRR's distributed-BFD messages as bfdd 8.4 lays them out, the
RFC 5880 control packet, and the session state machine two ends run against each other."""

import random
import struct

import pytest

from twin.lab.bfd import wire
from twin.lab.bfd.session import SLOW_TX_US, Session
from twin.lab.bfd.wire import ControlPacket, Diag, MessageType, SessionConfig, State


def _config(lid: int, src: str = "10.0.0.0", dst: str = "10.0.0.1", flags: int = 0,
            tx_us: int = 300_000) -> SessionConfig:
    return SessionConfig(lid=lid, flags=flags, src=src, dst=dst, min_tx_us=tx_us, min_rx_us=tx_us, detect_mult=3,
                         ttl=255, ifindex=7, ifname="sp-1")


def test_a_session_message_has_bfdd_84s_layout():
    """bfddp_packet.h v1: an 8-byte header, then 132 bytes with ifname at offset 68 (FRR asserts it)."""
    raw = wire.session_message(_config(0xDEADBEEF), ident=9)
    assert len(raw) == 8 + 132
    version, _zero, kind, ident, length = struct.unpack_from("!BBHHH", raw)
    assert (version, kind, ident, length) == (1, MessageType.DP_ADD_SESSION, 9, 140)
    assert raw[8 + 68:8 + 68 + 4] == b"sp-1"
    assert raw[8 + 4:8 + 8] == bytes([10, 0, 0, 0])  # src: IPv4 in the in6_addr's first 4 bytes
    buffer = bytearray(raw)
    [(kind, ident, payload)] = wire.split_messages(buffer)
    assert wire.parse_session(payload) == _config(0xDEADBEEF) and not buffer


def test_messages_are_split_on_their_lengths_and_a_partial_one_waits():
    one, two = wire.session_message(_config(1)), wire.session_message(_config(2), MessageType.DP_DELETE_SESSION)
    buffer = bytearray(one + two[:50])
    assert [wire.parse_session(p).lid for _k, _i, p in wire.split_messages(buffer)] == [1]
    assert len(buffer) == 50
    buffer += two[50:]
    assert [(k, wire.parse_session(p).lid) for k, _i, p in wire.split_messages(buffer)] == \
        [(MessageType.DP_DELETE_SESSION, 2)]


def test_a_message_of_another_version_is_refused():
    with pytest.raises(ValueError, match="version 2"):
        wire.split_messages(bytearray(b"\x02" + wire.session_message(_config(1))[1:]))


def test_a_state_change_carries_the_local_state_and_the_peers_discriminator():
    remote = ControlPacket(State.INIT, 0, 3, my_discr=77, your_discr=5, desired_min_tx_us=1_000_000,
                           required_min_rx_us=300_000)
    [(kind, _ident, payload)] = wire.split_messages(bytearray(wire.state_change(5, remote, State.UP)))
    assert kind == MessageType.BFD_STATE_CHANGE and len(payload) == 28
    assert wire.parse_state_change(payload) == (5, 77, State.UP)


def test_a_counters_reply_answers_the_request_it_was_asked_by():
    [(kind, ident, payload)] = wire.split_messages(bytearray(wire.counters_reply(41, 5, rx_packets=3, tx_packets=4)))
    lid, _in_bytes, in_packets, _out_bytes, out_packets, *_echo = wire.COUNTERS.unpack(payload)
    assert (kind, ident, lid, in_packets, out_packets) == (MessageType.BFD_SESSION_COUNTERS, 41, 5, 3, 4)


@pytest.mark.parametrize("mutate", [
    lambda b: bytes([0x40 | b[0] & 0x1F]) + b[1:],  # version 2
    lambda b: b[:2] + b"\x00" + b[3:],  # detect multiplier 0
    lambda b: b[:1] + bytes([b[1] | wire.MULTIPOINT]) + b[2:],
    lambda b: b[:1] + bytes([b[1] | wire.AUTH]) + b[2:],  # the lab configures no authentication
    lambda b: b[:4] + b"\0\0\0\0" + b[8:],  # my discriminator 0
    lambda b: b[:12],  # short
])
def test_control_packets_rfc_5880_says_to_discard_are_discarded(mutate):
    good = ControlPacket(State.UP, 0, 3, 1, 2, 300_000, 300_000).pack()
    assert wire.parse_control(good) is not None
    assert wire.parse_control(mutate(good)) is None


def test_an_up_packet_without_your_discriminator_is_discarded():
    assert wire.parse_control(ControlPacket(State.UP, 0, 3, 1, 0, 300_000, 300_000).pack()) is None
    assert wire.parse_control(ControlPacket(State.DOWN, 0, 3, 1, 0, 300_000, 300_000).pack()) is not None


class Link:
    """Two sessions and a wire between them that can drop one direction."""

    def __init__(self, seed: int = 0):
        self.a = Session(_config(11), rng=random.Random(seed))
        self.b = Session(_config(22, "10.0.0.1", "10.0.0.0"), rng=random.Random(seed + 1))
        self.cut_to_a = False

    def deliver(self, sender: Session, receiver: Session, raw: bytes | None, now: float) -> None:
        if raw is None or (receiver is self.a and self.cut_to_a):
            return
        packet = wire.parse_control(raw)
        changed, answer = receiver.receive(packet, now)
        if answer:
            self.deliver(receiver, sender, receiver.send_now(now), now)

    def run(self, until: float, now: float = 0.0, step: float = 0.01) -> float:
        while now < until:
            for sender, receiver in ((self.a, self.b), (self.b, self.a)):
                if sender.expire(now):  # as the data plane does: the news at once
                    self.deliver(sender, receiver, sender.send_now(now), now)
                self.deliver(sender, receiver, sender.due_packet(now), now)
            now += step
        return now


def test_two_ends_come_up_and_then_send_at_the_configured_rate():
    link = Link()
    now = link.run(0.05)
    assert link.a.state == link.b.state == State.UP
    assert link.a.advertised_tx_us == 300_000  # left slow start (1 s) on Up
    sent = link.a.tx_packets
    link.run(now + 3.0, now)
    assert 10 <= link.a.tx_packets - sent <= 14  # 3 s at 300 ms less 0-25 % jitter


@pytest.mark.parametrize("seed", range(20))  # the jitter decides when the last packet came
def test_one_way_loss_takes_the_deaf_end_down_after_the_detection_time_and_it_tells_the_other(seed):
    link = Link(seed)
    now = link.run(1.0)
    link.cut_to_a = True
    detection_s = link.a.detection_time_s()
    last_heard = link.a.detect_at - detection_s  # nothing reaches a from now on
    while link.a.state == State.UP:
        now = link.run(now + 0.01, now)
    # 3 x 300 ms after the last packet heard (which came up to one interval before the cut), to
    # the harness's 10 ms step
    assert detection_s == pytest.approx(0.9)
    assert 0.9 <= now - last_heard <= 0.9 + 0.02
    assert link.a.diag == Diag.CONTROL_EXPIRED
    link.run(now + 0.02, now)
    assert link.b.state != State.UP and link.b.diag == Diag.NEIGHBOR_DOWN  # heard a's Down
    link.cut_to_a = False
    link.run(now + 3.0, now)
    assert link.a.state == link.b.state == State.UP


def test_a_silent_peer_never_takes_a_session_up_and_never_expires_it():
    session = Session(_config(11))
    session.due_packet(0.0)
    assert session.state == State.DOWN and not session.expire(100.0)
    assert session._interval_s() >= 0.75 * SLOW_TX_US / 1e6  # not Up: a packet a second at most


def test_shutdown_sends_admin_down_and_the_peer_goes_down_with_diagnostic_neighbor_down():
    link = Link()
    now = link.run(0.5)
    assert link.a.reconfigure(_config(11, flags=wire.SessionFlag.SHUTDOWN))
    link.run(now + 1.5, now)
    assert link.a.state == State.ADMIN_DOWN and link.b.state == State.DOWN and link.b.diag == Diag.NEIGHBOR_DOWN
    assert link.a.reconfigure(_config(11))
    link.run(now + 5.0, now + 1.5)
    assert link.a.state == link.b.state == State.UP


def test_a_poll_is_answered_with_final_and_ends_the_sequence():
    link = Link()
    now = link.run(0.5)
    assert not link.a.reconfigure(_config(11, tx_us=100_000))
    assert link.a.polling and link.a.packet().poll
    link.run(now + 0.5, now)
    assert not link.a.polling  # b answered with F
    assert link.b.remote.desired_min_tx_us == 100_000
    assert link.b.detection_time_s() == pytest.approx(0.9)  # 3 x max(b's 300 ms RX, a's 100 ms TX)
