"""The queue programs' shared structures (queues.h) as Python reads and writes them: the state of
every queue (an mmap of the `queues` array), the ports maps' keys, the ring buffer's events.
tests/unit/test_bpf_layout.py checks every offset here against the BTF of the compiled object."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

OBJECT = Path(__file__).with_name("queues.bpf.o")  # built from queues.bpf.c by `make deps`

# struct queue
QUEUE = struct.Struct("<qQIIIIIIIIQq")  # occ, phase, xoff, xon, peak, lost, kmin, kmax, pmax, spare, marked,
QUEUE_FIELDS = ("occ", "phase", "xoff", "xon", "peak", "lost", "kmin", "kmax", "pmax", "spare", "marked",
                "discount")  # ... discount
OFFSET = {name: struct.calcsize("<" + QUEUE.format[1:1 + number]) for number, name in enumerate(QUEUE_FIELDS)}
INDEX = {name: number for number, name in enumerate(QUEUE_FIELDS)}  # a field's place in QUEUE.unpack
PROBABILITY_ONE = 1 << 16  # pmax's unit: 1/65536

SO_NETNS_COOKIE = 71  # socket option: the cookie of the socket's namespace, as the programs read it

# struct port_key
PORT_KEY = struct.Struct("<QII")  # netns cookie, ifindex, spare
QUEUE_ID = struct.Struct("<I")

# struct event
EVENT = struct.Struct("<IIIIQQ")  # queue, ingress ifindex, kind, spare, phase, time (ns)
XOFF, XON = 1, 2


def port_key(netns_cookie: int, ifindex: int) -> bytes:
    return PORT_KEY.pack(netns_cookie, ifindex, 0)


def netns_cookie(sock: socket.socket) -> int:
    """The cookie of the namespace `sock` lives in: the one the programs read from a packet's device."""
    return struct.unpack("<Q", sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8))[0]
