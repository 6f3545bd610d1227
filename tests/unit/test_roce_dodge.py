"""Dodging per QP (roce/nic.py, `path_offsets`): a QP whose packets or ACKs a path loses moves to
its source port's next path offset, and its peer takes the packets from there. Two NICs on the
loopback; the lossy path is a source port whose datagrams a socket drops (the fabric's ECMP
hashes by source port, so on a lab a lossy link is lossy for some source ports only)."""

import socket

import pytest

from twin.model import pathhash
from twin.roce.nic import Nic
from twin.roce.qp import Timers
from twin.roce.wire import ACK, DATA, unpack

OFFSETS = pathhash.OFFSET_MASK + 1


class LossyPorts:
    """Sockets that drop what they send while bound to a port in `bad`, when `drops(opcode)`."""

    def __init__(self, drops):
        self.bad: set[int] = set()
        self.drops = drops
        self.dropped = 0

    def __call__(self) -> socket.socket:
        lossy = self

        class Lossy(socket.socket):
            def sendmsg(self, buffers, *args):
                header = unpack(memoryview(buffers[0]))
                if self.getsockname()[1] in lossy.bad and header is not None and lossy.drops(header.opcode):
                    lossy.dropped += 1
                    return sum(len(b) for b in buffers)
                return super().sendmsg(buffers, *args)

        return Lossy(socket.AF_INET, socket.SOCK_DGRAM)


def every_third_of_the_first_data_batches(first: int = 60):
    """A third of the first batches of data lost (later, none: a lost tail waits for the timer,
    which doubles, and a path that always loses would take minutes that way)."""
    count = [0]

    def drops(opcode):
        count[0] += opcode == DATA
        return opcode == DATA and count[0] <= first and count[0] % 3 == 0
    return drops


def connected(sender: Nic, receiver: Nic) -> tuple[int, int]:
    """QP 1 on both, connected; their ports."""
    sport, dport = sender.endpoints[1].sock.getsockname()[1], receiver.endpoints[1].sock.getsockname()[1]
    sender.connect_qp(1, 1, "127.0.0.1", dport, "receiver")
    receiver.connect_qp(1, 1, "127.0.0.1", sport, "sender")
    return sport, dport


def send_checked(sender: Nic, receiver: Nic, megabytes: int, timeout_s: float = 30) -> None:
    data = bytes(range(256)) * (4096 * megabytes)
    buffer = bytearray(len(data))
    recv = receiver.post_recv(1, memoryview(buffer))
    send = sender.post_send(1, memoryview(data))
    sender.wait([send], timeout_s, "send")
    receiver.wait([recv], timeout_s)
    assert bytes(buffer) == data


@pytest.mark.parametrize("dodging", [True, False])
def test_a_qp_that_loses_data_moves_to_the_next_offset_and_stops_losing(dodging):
    lossy = LossyPorts(every_third_of_the_first_data_batches())
    offsets = OFFSETS if dodging else 0
    sender = Nic("127.0.0.1", "lo", 9000, Timers(1.0, 7), new_socket=lossy, path_offsets=offsets)
    receiver = Nic("127.0.0.1", "lo", 9000, Timers(1.0, 7), path_offsets=offsets)
    try:
        lossy.bad.add(sender.open_qp(1))
        receiver.open_qp(1)
        sport, _ = connected(sender, receiver)
        send_checked(sender, receiver, 8)  # some 950 packets in 140 batches
        stats, now = sender.stats(), next(s for s in sender.qp_states() if s["qp"] == 1)["sport"]
        if dodging:
            # moved along the offsets (the next one, or more on a machine that held the NIC's thread
            # back past STALLED_S), the hash's part of the port kept; lost only on the old path
            assert stats.dodges >= 1 and now != sport and now >> pathhash.OFFSET_BITS == sport >> pathhash.OFFSET_BITS
            assert stats.naks_received <= 2 and lossy.dropped, stats
        else:
            assert stats.dodges == 0 and now == sport and lossy.dropped, stats
    finally:
        sender.close()
        receiver.close()


def test_a_qp_whose_acks_are_lost_moves_them_and_no_timer_fires():
    """Every ACK from the receiver's port lost: the sender's packets wait, it moves and sends them
    again, the receiver gets them twice and moves its ACKs; no retransmission timer fires (5 s;
    without the move the QP fails at its one retry)."""
    lossy = LossyPorts(lambda opcode: opcode == ACK)
    sender = Nic("127.0.0.1", "lo", 9000, Timers(5.0, 1), path_offsets=OFFSETS)
    receiver = Nic("127.0.0.1", "lo", 9000, Timers(5.0, 1), new_socket=lossy, path_offsets=OFFSETS)
    try:
        lossy.bad.add(receiver.open_qp(1))
        sender.open_qp(1)
        connected(sender, receiver)
        send_checked(sender, receiver, 1, timeout_s=10)
        assert receiver.stats().dodges >= 1 and sender.stats().timeouts == 0, (receiver.stats(), sender.stats())
    finally:
        sender.close()
        receiver.close()


def test_a_nic_without_offsets_keeps_its_socket_connected_and_a_multipath_one_cannot_dodge():
    plain = Nic("127.0.0.1", "lo", 9000, Timers(1.0, 7))
    try:
        plain.open_qp(1)
        plain.connect_qp(1, 1, "127.0.0.1", 9, "peer")
        assert plain.endpoints[1].connected and plain.endpoints[1].sock.getpeername() == ("127.0.0.1", 9)
    finally:
        plain.close()
    with pytest.raises(ValueError, match="sprays"):
        Nic("127.0.0.1", "lo", 9000, Timers(1.0, 7), multipath=True, path_offsets=OFFSETS)
