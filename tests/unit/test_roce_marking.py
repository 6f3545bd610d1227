"""What a RoCE NIC's packets say to an adaptive fabric (roce/nic.py): a multipath NIC marks them
reorderable and repeats selectively; `multipath: rc` marks them and keeps RC's go-back-N (the
comparison issue 30 asks for); an RC NIC marks nothing."""

import socket

import pytest

from twin.roce import wire
from twin.roce.nic import Nic, multipath_modes, multipath_setting
from twin.roce.qp import QueuePair, Timers
from twin.roce.selective import SelectiveQueuePair
from twin.workloads.collective import CollectiveParams


@pytest.mark.parametrize(("multipath", "marked", "queue_pair"), [
    (False, False, QueuePair), (True, True, SelectiveQueuePair), ("rc", True, QueuePair)])
def test_a_nic_marks_its_packets_reorderable_as_the_job_says(multipath, marked, queue_pair):
    setting = multipath_setting(CollectiveParams(transport="roce", multipath=multipath).multipath)
    nic = Nic("127.0.0.1", "lo", 9000, Timers(0.1, 7), **multipath_modes(setting))
    try:
        nic.open_qp(1)
        endpoint = nic.endpoints[1]
        dscp = endpoint.sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) >> 2
        assert (dscp == wire.REORDERABLE_DSCP) is marked
        assert type(endpoint.qp) is queue_pair
    finally:
        nic.close()


def test_multipath_takes_true_false_or_rc_and_nothing_else():
    with pytest.raises(ValueError, match="multipath"):
        CollectiveParams(transport="roce", multipath="yes")


def _udp_source_ports(sniffer: socket.socket, dport: int) -> set[int]:
    """Source ports of the UDP datagrams to `dport` the sniffer saw on lo (Ethernet, IPv4)."""
    ports = set()
    while True:
        try:
            frame = sniffer.recv(65536)
        except BlockingIOError:
            return ports
        ip = frame[14:]
        if len(ip) >= 28 and ip[0] >> 4 == 4 and ip[9] == socket.IPPROTO_UDP:
            udp = ip[(ip[0] & 0x0F) * 4:]
            if int.from_bytes(udp[2:4], "big") == dport:
                ports.add(int.from_bytes(udp[0:2], "big"))


@pytest.mark.parametrize("multipath", [False, True])
def test_a_multipath_qp_sprays_its_data_over_entropy_values_and_delivers_it_whole(multipath):
    """A multipath QP's data leaves from ENTROPY source ports (so ECMP alone spreads it), and its
    peer's socket, no longer connected to one port, takes it all; an RC QP keeps one port."""
    from twin.roce.nic import ENTROPY
    sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    sniffer.bind(("lo", 0))
    sniffer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sniffer.setblocking(False)
    sender, receiver = (Nic("127.0.0.1", "lo", 9000, Timers(1.0, 7), multipath=multipath) for _ in range(2))
    try:
        sport, dport = sender.open_qp(1), receiver.open_qp(1)
        sender.connect_qp(1, 1, "127.0.0.1", dport, "receiver")
        receiver.connect_qp(1, 1, "127.0.0.1", sport, "sender")
        data = bytes(range(256)) * 4096  # 1 MiB, about 120 packets
        buffer = bytearray(len(data))
        recv = receiver.post_recv(1, memoryview(buffer))
        send = sender.post_send(1, memoryview(data))
        sender.wait([send], 20, "send")
        receiver.wait([recv], 20)
        assert bytes(buffer) == data
        ports = _udp_source_ports(sniffer, dport)
        assert len(ports) == (ENTROPY if multipath else 1), ports
    finally:
        sender.close()
        receiver.close()
        sniffer.close()
