"""BFD's steady state in the kernel (ebpf/bfd.bpf.c), as a switch ASIC keeps it in hardware.

Once a session is Up and quiet its peer sends the same 24 bytes every interval and it sends the
same frame back. The data plane then arms the session here: `bfd_receive`, on every switch port's
ingress, ends each packet equal to the expected one and stamps the time; `bfd_tick`, on each
switch's loopback, turns one tick the data plane sends per switch and interval into a copy of every
armed session's frame out of its port. The data plane keeps what changes (a state, a Poll, a new
timer: such a packet is not the expected one and reaches its socket as before) and the detection
timer, which it checks against the stamps in a shared array (mmap) instead of per packet.

What that saves: at rest each session cost the data plane two packets' work per interval (pod128
at 300 ms: 0.56 of a core); armed, one tick per switch per interval and a look at an array.
The packets are still real and cross the same ports, queues and faults.

Not RFC 5880's per-packet jitter: an armed session's packets leave at its switch's ticks, which
are jittered (75-100 % of the interval), so switches do not send in step but a switch's sessions
do.
"""

from __future__ import annotations

import errno
import mmap
import socket
import struct
from ipaddress import IPv4Address
from pathlib import Path

from twin.inet import checksum
from twin.lab.ebpf.libbpf import BpfObject, delete, update
from twin.lab.kernel import nlbatch

OBJECT = Path(__file__).resolve().parents[1] / "ebpf" / "bfd.bpf.o"
# struct bfd_key, bfd_rx, bfd_tx, bfd_switch (bfd.h); tests/unit/test_bpf_layout.py checks them
KEY = struct.Struct("<QII")
RX = struct.Struct("<24s6s6sII4xQQQ")
RX_FIELDS = ("expect", "peer_mac", "local_mac", "ifindex", "armed", "last_ns", "packets", "spare")
TX = struct.Struct("<IIQ66s6s")
TX_FIELDS = ("ifindex", "armed", "packets", "frame", "spare")
MAX_PER_SWITCH = 512
SWITCH = struct.Struct(f"<II{MAX_PER_SWITCH}I")
CONTROL_LEN, FRAME_LEN = 24, 66
TICK_PORT = 3785
SO_NO_CHECK = 11  # a UDP socket sends without a checksum: the tick's bytes are overwritten in flight
RECEIVE_PRIORITY = 0xF000  # after the physical layer's receive (0xE000): a faulty link loses BFD too
TICK_PRIORITY = 1
ETH_P_IP = 0x0800
UDP_SOURCE, UDP_DEST, TTL, TOS_CS6 = 49152, 3784, 255, 0xC0


RX_OFFSET = dict(zip(RX_FIELDS, (0, 24, 30, 36, 40, 48, 56, 64), strict=True))  # 4 bytes of padding before last_ns
TX_OFFSET = dict(zip(TX_FIELDS, (0, 4, 8, 16, 82), strict=True))


def frame(peer_mac: bytes, local_mac: bytes, src: str, dst: str, control: bytes) -> bytes:
    """A single-hop BFD control packet as the wire carries it: Ethernet, IPv4 (TTL 255, CS6, DF),
    UDP from port 49152 to 3784 without a checksum (IPv4 allows none), the control packet."""
    if len(control) != CONTROL_LEN:
        raise ValueError(f"a control packet without authentication is {CONTROL_LEN} bytes, not {len(control)}")
    udp_len = 8 + CONTROL_LEN
    header = struct.pack("!BBHHHBBH4s4s", 0x45, TOS_CS6, 20 + udp_len, 0, 0x4000, TTL, socket.IPPROTO_UDP, 0,
                         IPv4Address(src).packed, IPv4Address(dst).packed)
    header = header[:10] + struct.pack("!H", checksum(header)) + header[12:]
    return (peer_mac + local_mac + struct.pack("!H", ETH_P_IP) + header
            + struct.pack("!HHHH", UDP_SOURCE, UDP_DEST, udp_len, 0) + control)


class FastPath:
    """The loaded programs and their maps, for `sessions` sessions over `switches` switches. The
    data plane owns it; the filters it attaches keep the programs alive until the namespaces go."""

    def __init__(self, sessions: int, switches: int):
        self.capacity = max(1, sessions)
        self.bpf = BpfObject(OBJECT, max_entries={"bfd_index": self.capacity, "bfd_rx": self.capacity,
                                                  "bfd_tx": self.capacity, "bfd_switches": max(1, switches)})
        self.index_fd, self.switches_fd = self.bpf.map_fd("bfd_index"), self.bpf.map_fd("bfd_switches")
        self.rx = self._mmap("bfd_rx", RX.size)
        self.tx = self._mmap("bfd_tx", TX.size)
        self.free = list(range(self.capacity - 1, -1, -1))

    def _mmap(self, name: str, size: int) -> mmap.mmap:
        length = -(-self.capacity * size // mmap.PAGESIZE) * mmap.PAGESIZE
        return mmap.mmap(self.bpf.map_fd(name), length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def attach(self, netns: str, node: str, ports: dict[str, int], loopback: int) -> None:
        """`bfd_receive` on the ports' ingress (the node's shared block: every port of it, those
        without a session too, whose packets it passes), `bfd_tick` on the loopback's egress."""
        receive, tick = self.bpf.program_fd("bfd_receive"), self.bpf.program_fd("bfd_tick")
        with nlbatch.Sender(netns, node) as sender:
            for ifname, index in sorted(ports.items()):
                sender.add(nlbatch.clsact(), index, f"clsact on {ifname}", frozenset({errno.EEXIST}))
            if ports:  # once: the node's ports share the ingress block (a port without a session passes)
                sender.add_node_program(nlbatch.CLSACT_INGRESS, "bfd", receive, f"BFD receive on {node}'s ports",
                                        RECEIVE_PRIORITY)
            # the loopback's hooks are its own: the tick must not run on every port's egress
            sender.add(nlbatch.clsact(shared=False), loopback, "clsact on lo", frozenset({errno.EEXIST}))
            sender.add(nlbatch.with_program(nlbatch.bpf_filter(nlbatch.CLSACT_EGRESS, "bfd-tick", TICK_PRIORITY,
                                                               shared=False), tick), loopback, "BFD tick on lo")
            sender.flush()

    # -- sessions ---------------------------------------------------------------------------------
    def add(self, netns_cookie: int, discriminator: int) -> int | None:
        """A slot for the session (None when all are taken: it stays in user space)."""
        if not self.free:
            return None
        slot = self.free.pop()
        self.rx[slot * RX.size:(slot + 1) * RX.size] = bytes(RX.size)
        self.tx[slot * TX.size:(slot + 1) * TX.size] = bytes(TX.size)
        update(self.index_fd, KEY.pack(netns_cookie, discriminator, 0), struct.pack("<I", slot))
        return slot

    def remove(self, netns_cookie: int, discriminator: int, slot: int) -> None:
        self.disarm(slot)
        delete(self.index_fd, KEY.pack(netns_cookie, discriminator, 0))
        self.free.append(slot)

    def set_switch(self, netns_cookie: int, slots: list[int]) -> None:
        """The switch's sessions, in the order its tick sends them."""
        slots = slots[:MAX_PER_SWITCH]
        update(self.switches_fd, struct.pack("<Q", netns_cookie),
               SWITCH.pack(len(slots), 0, *slots, *[0] * (MAX_PER_SWITCH - len(slots))))

    def heard(self, slot: int) -> tuple[bytes, bytes, int] | None:
        """(peer MAC, local MAC, ifindex) of the last packet the session's port took in, if any."""
        base = slot * RX.size
        ifindex = struct.unpack_from("<I", self.rx, base + RX_OFFSET["ifindex"])[0]
        if not ifindex:
            return None
        return (bytes(self.rx[base + RX_OFFSET["peer_mac"]:base + RX_OFFSET["peer_mac"] + 6]),
                bytes(self.rx[base + RX_OFFSET["local_mac"]:base + RX_OFFSET["local_mac"] + 6]), ifindex)

    def arm(self, slot: int, expect: bytes, sent: bytes, ifindex: int, now_ns: int) -> None:
        """Packets equal to `expect` end in the kernel from now on (heard as of now), and `sent`
        (a whole frame) leaves `ifindex` at every tick."""
        rx, tx = slot * RX.size, slot * TX.size
        self.rx[rx + RX_OFFSET["expect"]:rx + RX_OFFSET["expect"] + CONTROL_LEN] = expect
        struct.pack_into("<Q", self.rx, rx + RX_OFFSET["last_ns"], now_ns)
        self.tx[tx + TX_OFFSET["frame"]:tx + TX_OFFSET["frame"] + FRAME_LEN] = sent
        struct.pack_into("<I", self.tx, tx + TX_OFFSET["ifindex"], ifindex)
        struct.pack_into("<I", self.tx, tx + TX_OFFSET["armed"], 1)
        struct.pack_into("<I", self.rx, rx + RX_OFFSET["armed"], 1)

    def disarm(self, slot: int) -> None:
        struct.pack_into("<I", self.rx, slot * RX.size + RX_OFFSET["armed"], 0)
        struct.pack_into("<I", self.tx, slot * TX.size + TX_OFFSET["armed"], 0)

    def last_heard_ns(self, slot: int) -> int:
        return struct.unpack_from("<Q", self.rx, slot * RX.size + RX_OFFSET["last_ns"])[0]

    def packets(self, slot: int) -> tuple[int, int]:
        """(received, sent) in the kernel for the session so far."""
        return (struct.unpack_from("<Q", self.rx, slot * RX.size + RX_OFFSET["packets"])[0],
                struct.unpack_from("<Q", self.tx, slot * TX.size + TX_OFFSET["packets"])[0])

    def close(self) -> None:
        self.rx.close()
        self.tx.close()
        self.bpf.close()


def tick_socket() -> socket.socket:
    """The socket a switch's ticks leave from (made in its namespace by the caller): UDP without a
    checksum to the loopback, where `bfd_tick` takes each one."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
    sock.setblocking(False)
    sock.connect(("127.0.0.1", TICK_PORT))
    return sock


TICK = bytes(CONTROL_LEN)  # its payload: 66 bytes on the loopback, a frame's length
