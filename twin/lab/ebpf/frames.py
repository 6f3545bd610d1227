"""Frames to run the data-plane programs on without a lab (BPF_PROG_TEST_RUN): what the tests and
the per-packet cost benchmarks hand the compiled programs (the queue programs, the ports' physical
layer)."""

from __future__ import annotations

import contextlib
import mmap
import socket
import struct
from collections.abc import Iterator

from twin.lab.ebpf import layout
from twin.lab.ebpf.libbpf import BpfObject, update

ECT0, CE = 0x02, 0x03  # the TOS byte's ECN field: ECN-capable (0), Congestion Experienced


def ipv4_udp(tos: int, payload_bytes: int = 58) -> bytes:
    """Ethernet, IPv4 with a valid header checksum, UDP; 42 bytes of headers plus the payload."""
    payload = bytes(payload_bytes)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + 8 + len(payload), 1, 0, 64, 17, 0,
                               socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")))
    words = sum(struct.unpack("!10H", ip))
    struct.pack_into("!H", ip, 10, ~((words & 0xFFFF) + (words >> 16)) & 0xFFFF)
    return bytes(12) + b"\x08\x00" + bytes(ip) + struct.pack("!HHHH", 1000, 2000, 8 + len(payload), 0) + payload


@contextlib.contextmanager
def loopback_queue() -> Iterator[tuple[BpfObject, mmap.mmap]]:
    """The queue programs loaded with one queue, this namespace's loopback (where a test run's
    packet appears) registered as its port: (the object, the queue's state, mmap-ed read-write)."""
    obj = BpfObject(layout.OBJECT, max_entries={"queues": 1, "enqueue_ports": 1, "dequeue_ports": 1})
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            cookie = layout.netns_cookie(sock)
        port = layout.port_key(cookie, socket.if_nametoindex("lo"))
        update(obj.map_fd("enqueue_ports"), port, layout.QUEUE_ID.pack(0))
        update(obj.map_fd("dequeue_ports"), port, layout.QUEUE_ID.pack(0))
        with mmap.mmap(obj.map_fd("queues"), mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as state:
            yield obj, state
    finally:
        obj.close()


@contextlib.contextmanager
def loopback_phy(phy_object) -> Iterator[BpfObject]:
    """The ports' physical layer (lab/ports/phy.py's object) loaded with one port, this namespace's
    loopback (where a test run's packet appears), as element 0 of its maps."""
    obj = BpfObject(phy_object, max_entries={"phy_ports": 1, "phy_faults": 1, "phy_counts": 1})
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            cookie = layout.netns_cookie(sock)
        update(obj.map_fd("phy_ports"), layout.port_key(cookie, socket.if_nametoindex("lo")), struct.pack("<I", 0))
        yield obj
    finally:
        obj.close()
