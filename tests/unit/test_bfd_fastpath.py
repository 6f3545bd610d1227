"""BFD's fast path (twin/lab/bfd/fastpath.py, ebpf/bfd.bpf.c): the frames the data plane hands the
kernel, the structures both sides read, and the receive program run on packets (BPF_PROG_TEST_RUN:
no lab, no device)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import time

import pytest

from twin.lab.bfd import fastpath
from twin.lab.bfd.wire import ControlPacket, State
from twin.lab.ebpf import layout
from twin.lab.ebpf.libbpf import run_on_packet

built = pytest.mark.skipif(not fastpath.OBJECT.is_file(), reason="the BPF object is built by `make deps`")
root = pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root")
PEER_MAC, OUR_MAC = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
OUR_DISCR, PEER_DISCR = 7, 9


def steady(state: State = State.UP, poll: bool = False) -> bytes:
    """What the peer sends once Up: its discriminator, ours, 300 ms both ways."""
    return ControlPacket(state=state, diag=0, detect_mult=3, my_discr=PEER_DISCR, your_discr=OUR_DISCR,
                         desired_min_tx_us=300_000, required_min_rx_us=300_000, poll=poll, final=False).pack()


def from_peer(control: bytes, ttl: int = 255) -> bytes:
    frame = bytearray(fastpath.frame(OUR_MAC, PEER_MAC, "10.0.0.1", "10.0.0.0", control))
    frame[22] = ttl  # the IP header's TTL
    return bytes(frame)


def test_a_frame_is_a_single_hop_bfd_packet_as_the_wire_carries_it():
    control = steady()
    frame = fastpath.frame(PEER_MAC, OUR_MAC, "10.0.0.0", "10.0.0.1", control)
    assert len(frame) == fastpath.FRAME_LEN and frame[:12] == PEER_MAC + OUR_MAC and frame[12:14] == b"\x08\x00"
    ip = frame[14:34]
    version_ihl, tos, total, _ident, flags, ttl, proto, _csum, src, dst = struct.unpack("!BBHHHBBH4s4s", ip)
    assert (version_ihl, tos, total, flags, ttl, proto) == (0x45, 0xC0, 52, 0x4000, 255, socket.IPPROTO_UDP)
    assert (socket.inet_ntoa(src), socket.inet_ntoa(dst)) == ("10.0.0.0", "10.0.0.1")
    words = struct.unpack("!10H", ip)
    total_sum = sum(words)
    assert (total_sum & 0xFFFF) + (total_sum >> 16) == 0xFFFF  # the header checksum holds
    assert struct.unpack("!HHHH", frame[34:42]) == (49152, 3784, 32, 0) and frame[42:] == control
    with pytest.raises(ValueError, match="24 bytes"):
        fastpath.frame(PEER_MAC, OUR_MAC, "10.0.0.0", "10.0.0.1", control + b"\0" * 4)


@built
@pytest.mark.skipif(shutil.which("bpftool") is None, reason="bpftool is installed by `make deps`")
def test_the_python_layout_is_the_objects():
    dump = subprocess.run(["bpftool", "btf", "dump", "file", str(fastpath.OBJECT), "-j"], capture_output=True,
                          text=True, check=True)
    structs = {t["name"]: t for t in json.loads(dump.stdout)["types"] if t.get("kind") == "STRUCT" and t.get("name")}
    for name, layout_, fields, offsets in (("bfd_rx", fastpath.RX, fastpath.RX_FIELDS, fastpath.RX_OFFSET),
                                           ("bfd_tx", fastpath.TX, fastpath.TX_FIELDS, fastpath.TX_OFFSET)):
        assert structs[name]["size"] == layout_.size
        assert {m["name"]: m["bits_offset"] // 8 for m in structs[name]["members"]} == offsets
        assert [m["name"] for m in structs[name]["members"]] == list(fields)
    assert structs["bfd_key"]["size"] == fastpath.KEY.size
    assert structs["bfd_switch"]["size"] == fastpath.SWITCH.size


@pytest.fixture
def loaded():
    path = fastpath.FastPath(sessions=4, switches=1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:  # a test run's packet is on this namespace's lo
        cookie = layout.netns_cookie(sock)
    try:
        yield path, cookie, path.bpf.program_fd("bfd_receive")
    finally:
        path.close()


@built
@root
def test_the_expected_packet_ends_in_the_kernel_stamped_and_anything_else_goes_on(loaded):
    path, cookie, receive = loaded
    slot = path.add(cookie, OUR_DISCR)
    assert run_on_packet(receive, from_peer(steady()))[0] == 0  # not armed yet: on to the socket
    peer_mac, our_mac, ifindex = path.heard(slot)
    assert (peer_mac, our_mac) == (PEER_MAC, OUR_MAC) and ifindex > 0
    armed_at = time.monotonic_ns()
    path.arm(slot, steady(), fastpath.frame(peer_mac, our_mac, "10.0.0.0", "10.0.0.1", steady()), ifindex, armed_at)
    assert run_on_packet(receive, from_peer(steady()), repeat=3)[0] == 2  # TC_ACT_SHOT
    assert path.packets(slot) == (3, 0) and path.last_heard_ns(slot) > armed_at
    for changed in (steady(State.DOWN), steady(poll=True)):  # the peer went down, or polls: the data plane's
        assert run_on_packet(receive, from_peer(changed))[0] == 0
    assert run_on_packet(receive, from_peer(steady(), ttl=254))[0] == 0  # not from the link
    path.disarm(slot)
    assert run_on_packet(receive, from_peer(steady()))[0] == 0
    path.remove(cookie, OUR_DISCR, slot)
    path.arm(slot, steady(), bytes(fastpath.FRAME_LEN), ifindex, armed_at)  # armed, but no session owns it
    assert run_on_packet(receive, from_peer(steady()))[0] == 0
    assert path.packets(slot) == (3, 0)


@built
@root
def test_slots_run_out_and_come_back(loaded):
    path, cookie, _receive = loaded
    slots = [path.add(cookie, discr) for discr in range(1, 5)]
    assert sorted(slots) == [0, 1, 2, 3] and path.add(cookie, 5) is None  # the fifth stays in user space
    path.remove(cookie, 2, slots[1])
    assert path.add(cookie, 5) == slots[1]
