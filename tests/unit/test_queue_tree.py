"""A port's queue tree (model/queue_tree.py): which class a packet's header sends it to. The
filters are evaluated here as u32 evaluates them (the first matching filter by priority wins, every
match of a filter on the network header's bytes under its mask), on packets the RoCE transport
really builds (roce/wire.py)."""

import socket
import struct

import pytest

from twin.model import queue_tree
from twin.model.queue_tree import CLASS_HANDLE, CONTROL_HANDLE, ROOT_HANDLE, HtbClass, HtbRoot, U32Filter
from twin.roce import wire

RATE = 200_000_000


def _ip_udp(payload: bytes, dport: int = 4791) -> bytes:
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + len(payload), 0, 0, 64, socket.IPPROTO_UDP, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return ip + struct.pack("!HHHH", 50000, dport, 8 + len(payload), 0) + payload


def _class_of(tree, packet: bytes, ethertype: int = queue_tree.ETH_P_IP) -> int:
    filters = sorted((e for e in tree if isinstance(e, U32Filter)), key=lambda f: f.prio)
    for f in filters:
        if f.protocol == ethertype and all(
                int.from_bytes(packet[m.offset:m.offset + m.size], "big") & m.bits == m.value & m.bits
                for m in f.matches):
            return f.target
    return CLASS_HANDLE  # the root's default


RESPONSES = {"ACK": wire.Header(wire.ACK, 7, 100), "NAK": wire.Header(wire.NAK, 7, 100),
             "CNP": wire.Header(wire.CNP, 7, 0), "SACK": wire.sack(7, 100, 105, 0b1011)}


@pytest.mark.parametrize("name", sorted(RESPONSES))
def test_a_nics_transport_responses_skip_its_data_queue_and_a_switchs_do_not(name):
    packet = _ip_udp(RESPONSES[name].pack())
    assert _class_of(queue_tree.port_tree(RATE, 1 << 20, 9000, nic=True), packet) == CONTROL_HANDLE
    assert _class_of(queue_tree.port_tree(RATE, 1 << 20, 9000), packet) == CLASS_HANDLE


def test_a_switchs_control_goes_to_the_roots_direct_queue_and_its_port_binds_two_filter_blocks():
    """BGP, BFD and ARP on a switch's port skip the data class for HTB's direct queue (a filter's
    target equal to the root's handle), so a closed gate never holds them; each HTB qdisc and class
    binds a tc block the kernel walks a list of at every bind (AIPod's shaping phase), so a switch's
    port holds the root and the data class only."""
    tree = queue_tree.port_tree(RATE, 1 << 20, 9000)
    bgp = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, socket.IPPROTO_TCP, 0, bytes(4), bytes(4)) + \
        struct.pack("!HH", 50000, queue_tree.BGP_PORT) + bytes(16)
    assert _class_of(tree, bgp) == ROOT_HANDLE
    assert _class_of(tree, _ip_udp(bytes(24), dport=queue_tree.BFD_PORT)) == ROOT_HANDLE
    assert _class_of(tree, bytes(28), ethertype=queue_tree.ETH_P_ARP) == ROOT_HANDLE
    assert _class_of(tree, _ip_udp(bytes(100))) == CLASS_HANDLE
    blocks = [e for e in tree if isinstance(e, HtbRoot | HtbClass)]
    assert len(blocks) == 2 and blocks[1].parent == ROOT_HANDLE and blocks[1].ceil_bps == RATE
    assert queue_tree.data_class(RATE, 9000) == blocks[1]
    assert all(c[-1] == "1:" for c in queue_tree.tc_commands(tree, "eth1") if "flowid" in c)


def test_data_path_discovery_and_other_udp_stay_in_the_data_class_of_a_nic():
    nic = queue_tree.port_tree(RATE, 1 << 20, 9000, nic=True)
    data = wire.Header(wire.DATA, 7, 100, msg=1, offset=0, msg_len=8948).pack() + bytes(8948)
    trace = wire.Header(wire.TRACE, 7, 3, msg=7).pack()
    not_ours = bytes([0xC4, wire.ACK]) + bytes(22)  # another magic: someone else's UDP
    for payload in (data, trace, not_ours):
        assert _class_of(nic, _ip_udp(payload)) == CLASS_HANDLE
    bfd = _ip_udp(bytes(24), dport=queue_tree.BFD_PORT)
    assert _class_of(nic, bfd) == CONTROL_HANDLE  # the control plane's filters are there as on a switch


def test_the_tree_speaks_the_transports_header():
    """queue_tree may not import roce/ (the layers): its copy of the header must agree."""
    assert queue_tree.ROCE_MAGIC == wire.MAGIC
    assert sorted(op for pair in queue_tree.ROCE_RESPONSES for op in pair) == sorted(
        (wire.ACK, wire.NAK, wire.CNP, wire.SACK))
    assert queue_tree.ROCE_RESPONSE_BYTES == queue_tree.ETHERNET_HEADER_BYTES + wire.IP_UDP_HEADERS + wire.HEADER.size


@pytest.mark.parametrize("mtu", [1500, 4200, 9000])
def test_a_nics_control_class_is_guaranteed_a_response_per_data_packet(mtu):
    control = next(e for e in queue_tree.port_tree(RATE, 1 << 20, mtu, nic=True)
                   if isinstance(e, HtbClass) and e.handle == CONTROL_HANDLE)
    frames_per_s = RATE / 8 / (mtu + queue_tree.ETHERNET_HEADER_BYTES)
    assert control.rate_bps >= frames_per_s * queue_tree.ROCE_RESPONSE_BYTES * 8
    assert control.rate_bps >= RATE * queue_tree.CONTROL_SHARE and control.ceil_bps == RATE


def test_a_mask_reaches_tc():
    commands = queue_tree.tc_commands(queue_tree.port_tree(RATE, 1 << 20, 9000, nic=True), "eth1")
    masked = [c for c in commands if "0xfffe" in c]
    assert len(masked) == 2 and all("at" in c and "28" in c for c in masked)


@pytest.mark.parametrize("rate_bps", [10_000_000, 100_000_000, 200_000_000, 1_000_000_000, 10_000_000_000])
@pytest.mark.parametrize("mtu", [1500, 4200, 9000])
def test_a_shaper_makes_up_for_a_late_timer_without_a_burst_the_next_queue_marks(rate_bps, mtu):
    """Every class's burst holds two frames or a frame and SHAPER_SLACK_S of line time (what a timer
    woken that late lost is sent at once), and less than the default ECN threshold Kmin of the queue
    it bursts into, so a healthy flow at line rate is not marked for the shapers' catching up."""
    from twin.model.buffers import ECN_KMIN_MS, MIN_ECN_FRAMES, frame_bytes, line_bytes

    classes = [e for e in queue_tree.port_tree(rate_bps, 1 << 20, mtu, nic=True) if isinstance(e, HtbClass)]
    frame = frame_bytes(mtu)
    kmin = max(line_bytes(rate_bps, ECN_KMIN_MS), MIN_ECN_FRAMES * frame)
    assert len(classes) == 3
    for htb in classes:
        assert htb.burst >= 2 * frame and htb.burst >= frame + rate_bps / 8 * queue_tree.SHAPER_SLACK_S - 1
        assert htb.burst < kmin
    assert "burst" in queue_tree.tc_commands((classes[0],), "eth1")[0]
