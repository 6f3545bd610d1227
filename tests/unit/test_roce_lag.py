"""A dual-port NIC's QPs over its ports (roce/lag.py): placed in turn, moved to the other port
while their own has no carrier, and back when it returns; a closed socket is forgotten."""

import socket

import pytest

from twin import sockopts
from twin.roce import lag


@pytest.fixture
def ports(monkeypatch):
    carrier = {"nic1a": True, "nic1b": True}
    sent_from: dict[int, int] = {}
    monkeypatch.setattr(lag, "interface_index", lambda _sock, name: {"nic1a": 7, "nic1b": 8}[name])
    monkeypatch.setattr(lag, "has_carrier", lambda _sock, name: carrier[name])
    monkeypatch.setattr(lag, "send_from", lambda sock, index: sent_from.__setitem__(sock.fileno(), index))
    affinity = lag.PortAffinity(("nic1a", "nic1b"), lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    yield affinity, carrier, sent_from
    affinity.close()


def test_qps_take_the_ports_in_turn_and_leave_a_dead_one_until_it_returns(ports):
    affinity, carrier, sent_from = ports
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(4)]
    try:
        for lane, sock in enumerate(socks):
            affinity.place(sock, lane)
        assert [sent_from[s.fileno()] for s in socks] == [7, 8, 7, 8]
        carrier["nic1a"] = False
        fled = affinity.follow_carrier(1.0)  # what they had queued there went with the carrier
        assert fled == {socks[0].fileno(), socks[2].fileno()}
        assert [sent_from[s.fileno()] for s in socks] == [8, 8, 8, 8]
        late = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        socks.append(late)
        affinity.place(late, 0)  # a QP opened while its port is down starts on the other
        assert sent_from[late.fileno()] == 8
        carrier["nic1a"] = True
        affinity.follow_carrier(1.001)  # within CARRIER_CHECK_S: not looked at yet
        assert sent_from[socks[0].fileno()] == 8
        socks[2].close()
        assert affinity.follow_carrier(1.0 + lag.CARRIER_CHECK_S) == set()  # back home: nothing was lost
        assert [sent_from[s.fileno()] for s in (socks[0], socks[1], socks[3], late)] == [7, 8, 8, 7]
        assert len(affinity.placed) == 4
        carrier.update(nic1a=False, nic1b=False)  # nowhere to go: each stays where it is
        affinity.follow_carrier(2.0)
        assert [entry[2] for entry in affinity.placed] == ["nic1a", "nic1b", "nic1b", "nic1a"]
    finally:
        for sock in socks:
            sock.close()


def test_a_ports_carrier_and_index_are_the_kernels():
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        assert lag.interface_index(probe, "lo") == socket.if_nametoindex("lo")
        assert lag.has_carrier(probe, "lo")
        with pytest.raises(OSError):
            lag.has_carrier(probe, "nosuchport0")
        probe.connect(("127.0.0.1", 9))
        sockopts.send_from_port(probe, "lo")  # connected: connected again, to the same peer
        chosen = probe.getsockopt(socket.IPPROTO_IP, sockopts.IP_UNICAST_IF, 4)
        assert int.from_bytes(chosen, "big") == socket.if_nametoindex("lo")
        assert probe.getpeername() == ("127.0.0.1", 9)
    finally:
        probe.close()
