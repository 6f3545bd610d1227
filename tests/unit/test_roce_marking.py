"""What a RoCE NIC's packets say to an adaptive fabric (roce/nic.py): a multipath NIC marks them
reorderable and repeats selectively; `multipath: rc` marks them and keeps RC's go-back-N (the
comparison issue 30 asks for); an RC NIC marks nothing."""

import os
import socket
import subprocess

import pytest

from twin.lab.kernel.nsutil import in_netns
from twin.roce import wire
from twin.roce.dcqcn import DcqcnParams
from twin.roce.nic import Nic, multipath_modes, multipath_setting
from twin.roce.qp import QueuePair, Timers
from twin.roce.selective import SelectiveQueuePair
from twin.sockopts import SO_RCVBUFFORCE
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


def _udp_seen(sniffer: socket.socket) -> list[tuple[int, int, int]]:
    """(source port, destination port, DSCP) of every UDP datagram the sniffer saw on lo."""
    seen = []
    while True:
        try:
            frame = sniffer.recv(65536)
        except BlockingIOError:
            return seen
        ip = frame[14:]
        if len(ip) >= 28 and ip[0] >> 4 == 4 and ip[9] == socket.IPPROTO_UDP:
            udp = ip[(ip[0] & 0x0F) * 4:]
            seen.append((int.from_bytes(udp[0:2], "big"), int.from_bytes(udp[2:4], "big"), ip[1] >> 2))


@pytest.fixture
def own_lo():
    """The test's thread in a network namespace of its own, with its loopback up: what the sniffer
    sees on lo is the test's alone. On the machine's lo it shared its buffer with whatever else ran
    there (a CI run's other worker's labs) and once saw none of the test's datagrams."""
    name = f"ftt-roce-mark-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        with in_netns(f"/run/netns/{name}"):
            yield
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


@pytest.mark.parametrize("multipath", [False, True])
def test_a_multipath_qp_sprays_its_data_over_entropy_values_and_delivers_it_whole(multipath, own_lo):
    """A multipath QP's data leaves from ENTROPY source ports (so ECMP alone spreads it), and its
    peer's socket, no longer connected to one port, takes it all; its ACKs are sprayed and marked
    reorderable as its data. An RC QP keeps one port, its ACKs unmarked."""
    from twin.roce.nic import ENTROPY
    sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    sniffer.bind(("lo", 0))
    # every frame of both messages, seen twice on lo (out and in), past net.core.rmem_max
    sniffer.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
    sniffer.setblocking(False)
    dcqcn = DcqcnParams().for_line_rate(10e9)  # controls then carry their own TOS byte
    sender, receiver = (Nic("127.0.0.1", "lo", 9000, Timers(1.0, 7), dcqcn=dcqcn, multipath=multipath)
                        for _ in range(2))
    try:
        sport, dport = sender.open_qp(1), receiver.open_qp(1)
        sender.connect_qp(1, 1, "127.0.0.1", dport, "receiver")
        receiver.connect_qp(1, 1, "127.0.0.1", sport, "sender")
        data = bytes(range(256)) * 4096  # 1 MiB, about 120 packets
        # Twice, one after the other: each message is acknowledged at least once, so at least two
        # ACKs leave (a receiver that took all of one message in one batch acknowledged it once,
        # and the ACKs' spraying could not show: a CI failure of 2026-11-30).
        for _ in range(2):
            buffer = bytearray(len(data))
            recv = receiver.post_recv(1, memoryview(buffer))
            send = sender.post_send(1, memoryview(data))
            sender.wait([send], 20, "send")
            receiver.wait([recv], 20)
            assert bytes(buffer) == data
        seen = _udp_seen(sniffer)
        data_ports = {source for source, to, _dscp in seen if to == dport}
        assert len(data_ports) == (ENTROPY if multipath else 1), data_ports
        acks = [(source, dscp) for source, to, dscp in seen if to == sport]
        assert {dscp for _source, dscp in acks} == {wire.REORDERABLE_DSCP if multipath else 0}, acks
        assert len({source for source, _dscp in acks}) > (1 if multipath else 0), acks  # sprayed too
    finally:
        sender.close()
        receiver.close()
        sniffer.close()
