"""The queue programs' shared structures (queues.h) as Python reads and writes them: the state of
every queue (an mmap of the `queues` array), the ports maps' keys, the ring buffer's events.
tests/unit/test_bpf_layout.py checks every offset here against the BTF of the compiled object."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

OBJECT = Path(__file__).with_name("queues.bpf.o")  # built from queues.bpf.c by `make deps`

# struct queue
QUEUE = struct.Struct("<qQIIIIIIIIQqQQQ")  # occ, phase, xoff, xon, peak, lost, kmin, kmax, pmax, buffer,
QUEUE_FIELDS = ("occ", "phase", "xoff", "xon", "peak", "lost", "kmin", "kmax", "pmax", "buffer", "marked",
                "discount", "steered_in", "steered_away", "late")  # ... marked, discount, steered, late
OFFSET = {name: struct.calcsize("<" + QUEUE.format[1:1 + number]) for number, name in enumerate(QUEUE_FIELDS)}
INDEX = {name: number for number, name in enumerate(QUEUE_FIELDS)}  # a field's place in QUEUE.unpack
PROBABILITY_ONE = 1 << 16  # pmax's unit: 1/65536

SO_NETNS_COOKIE = 71  # socket option: the cookie of the socket's namespace, as the programs read it

# struct port_key
PORT_KEY = struct.Struct("<QII")  # netns cookie, ifindex, spare
QUEUE_ID = struct.Struct("<I")

# adaptive routing (balance.h): struct balance, struct ecmp_group
BALANCE = struct.Struct("<IIQII")  # mode, choices, flowlet_gap_ns, hash_offset, spare
BALANCE_MODES = {"ecmp": 0, "flowlet": 1, "packet": 2}
MAX_MEMBERS = 64
ECMP_GROUP = struct.Struct(f"<II{MAX_MEMBERS}I{MAX_MEMBERS}I")  # count, seed, ifindex[], queue[]
REORDERABLE_DSCP = 10  # what a NIC writes in the DSCP of a packet its receiver may take out of order

# struct event
EVENT = struct.Struct("<IIIIQQ")  # queue, ingress ifindex, kind, spare, phase, time (ns)
XOFF, XON = 1, 2


def port_key(netns_cookie: int, ifindex: int) -> bytes:
    return PORT_KEY.pack(netns_cookie, ifindex, 0)


def ecmp_group(members: list[tuple[int, int]], seed: int) -> bytes:
    """An ECMP group's members as (ifindex, queue id) pairs, at most MAX_MEMBERS, and its
    switch's hash seed."""
    members = members[:MAX_MEMBERS]
    padding = [0] * (MAX_MEMBERS - len(members))
    return ECMP_GROUP.pack(len(members), seed, *[i for i, _ in members], *padding, *[q for _, q in members], *padding)


def netns_cookie(sock: socket.socket) -> int:
    """The cookie of the namespace `sock` lives in: the one the programs read from a packet's device."""
    return struct.unpack("<Q", sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8))[0]
