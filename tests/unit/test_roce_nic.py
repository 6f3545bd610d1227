"""The NIC's thread and the collective's thread (roce/nic.py): the NIC wakes the collective when
one of its requests is done or failed, not for every packet it moves."""

import pytest

from twin.roce.nic import Nic
from twin.roce.qp import QueuePair, Timers


class CountingPoller:
    """The NIC's epoll, counting its turns (each turn used to wake the collective's thread)."""

    def __init__(self, inner):
        self.inner, self.turns = inner, 0

    def poll(self, timeout):
        self.turns += 1
        return self.inner.poll(timeout)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("multipath", [False, True])
def test_the_collective_is_woken_for_finished_requests_not_for_every_packet(multipath):
    sender, receiver = (Nic("127.0.0.1", "lo", 9000, Timers(1.0, 7), multipath=multipath) for _ in range(2))
    wakes = []
    try:
        for nic in (sender, receiver):
            nic.poller = CountingPoller(nic.poller)
            notify = nic.cond.notify_all
            nic.cond.notify_all = lambda notify=notify: (wakes.append(1), notify())[1]
        sport, dport = sender.open_qp(1), receiver.open_qp(1)
        sender.connect_qp(1, 1, "127.0.0.1", dport, "receiver")
        receiver.connect_qp(1, 1, "127.0.0.1", sport, "sender")
        data = bytes(range(256)) * 65536  # 16 MiB, about 1,900 packets
        buffers = [bytearray(len(data)) for _ in range(3)]
        recvs = [receiver.post_recv(1, memoryview(b)) for b in buffers]
        sends = [sender.post_send(1, memoryview(data)) for _ in buffers]
        sender.wait(sends, 30, "send")
        receiver.wait(recvs, 30)
        assert all(bytes(b) == data for b in buffers)
        turns = sender.poller.turns + receiver.poller.turns
        # six requests finish (a wake may cover several); a wake a turn would be more
        assert 1 <= len(wakes) <= 6 < turns, (len(wakes), turns)
    finally:
        sender.close()
        receiver.close()


def test_a_queue_pair_counts_what_finished_either_way():
    sender, receiver = QueuePair(1, 2, 1000), QueuePair(2, 1, 1000)
    send = sender.post_send(memoryview(bytes(2500)))
    recv = receiver.post_recv(memoryview(bytearray(2500)))
    for header, piece in sender.peek(8):
        receiver.on_data(header, piece, 0.0)
    sender.commit(sender.peek(8), 0.0)
    assert recv.done and receiver.finished == 1 and sender.finished == 0
    sender.on_ack(receiver.expected, 0.01)
    assert send.done and sender.finished == 1
    sender.post_send(memoryview(bytes(10)))
    sender.fail("test")
    assert sender.finished == 2
