"""All-pairs reachability with real packets: ICMP echo from every host NIC to every other.

Raw ICMP sockets are opened inside each host's namespace, bound to one NIC's
address and device, so each echo leaves through its own rail (per-NIC source
routing) and crosses the real fabric. One process, no per-pair subprocess.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
import zlib
from dataclasses import dataclass

from twin.lab.handle import Lab
from twin.model.fabric import Fabric
from twin.sockopts import SO_RCVBUFFORCE

SOL_RAW = 255
ICMP_FILTER = 1  # SOL_RAW option of raw ICMP sockets: a bitmask of the ICMP types to drop
ECHO_REPLY = 0
RCVBUF = 8 << 20

# Destinations per NIC in the reachability sample a lab's convergence check uses (all pairs grow
# with NICs squared: 63,488 at pod128, 10 s of echoes); `twin lab up --all-pairs` checks all.
SAMPLE_PER_NIC = 32


@dataclass(frozen=True)
class Nic:
    host: str
    ifname: str
    address: str
    rail: int = 1
    leaf: str = ""

    @property
    def label(self) -> str:
        return f"{self.host}:{self.ifname}"


def fabric_nics(fabric: Fabric) -> list[Nic]:
    return [Nic(link.b.node, link.b.ifname, str(link.b.address.ip), link.rail or 1, link.a.node)
            for link in fabric.links if link.kind == "host"]


def fabric_pairs(nics: list[Nic]) -> list[tuple[int, int]]:
    """Index pairs of NICs on different hosts: the pairs whose traffic crosses the fabric."""
    return [(s, d) for s in range(len(nics)) for d in range(len(nics)) if nics[s].host != nics[d].host]


def sample_pairs(nics: list[Nic], per_nic: int = SAMPLE_PER_NIC) -> list[tuple[int, int]]:
    """Pairs in which every NIC sends to about `per_nic` NICs of other hosts and answers as many;
    all pairs when that is not more. The NICs are put on a ring, rails interleaved and each rail
    in a fixed shuffled order, and each NIC sends to the NICs at `per_nic` offsets spread evenly
    around it, the offsets' residues cycling through the rails: destinations span every rail and
    many leaves. At pod128 (256 NICs, 8,192 of 63,488 pairs) echo and reply cross each direction
    of each switch link about 15 times on average: ECMP's hash would have to miss a link every
    time (the ECMP check has already seen every next hop installed)."""
    pairs = fabric_pairs(nics)
    if len(pairs) <= len(nics) * per_nic:
        return pairs
    by_rail: dict[int, list[int]] = {}
    for index in sorted(range(len(nics)), key=lambda i: zlib.crc32(nics[i].label.encode())):
        by_rail.setdefault(nics[index].rail, []).append(index)
    rails = [by_rail[rail] for rail in sorted(by_rail)]
    ring = [rail[k] for k in range(max(map(len, rails))) for rail in rails if k < len(rail)]
    chosen = set()
    for position, src in enumerate(ring):
        for step in range(per_nic):
            offset = 1 + step * (len(ring) - 1) // per_nic
            offset += (step - offset) % len(rails)  # the rails in turn
            for _ in range(len(ring)):
                dst = ring[(position + offset) % len(ring)]
                if nics[dst].host != nics[src].host:
                    chosen.add((src, dst))
                    break
                offset += len(rails)
    return sorted(chosen)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def _echo(ident: int, seq: int) -> bytes:
    payload = b"fabric-twin-reach"
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    return struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, seq) + payload


def _open_socket(lab: Lab, nic: Nic) -> socket.socket:
    sock = lab.socket(nic.host, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, nic.ifname.encode())
    # A raw socket gets a copy of every ICMP packet its NIC receives: in pod128 each NIC takes 255
    # echo requests and 255 replies per round, more than the default 208 KB buffer holds, and the
    # replies it dropped were counted as unreachable pairs. Keep only replies, in a larger buffer.
    sock.setsockopt(SOL_RAW, ICMP_FILTER, struct.pack("=I", 0xFFFFFFFF & ~(1 << ECHO_REPLY)))
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
    sock.bind((nic.address, 0))
    sock.setblocking(False)
    return sock


def checked_pairs(nics: list[Nic], all_pairs: bool) -> list[tuple[int, int]]:
    """The pairs a convergence check sends echoes between: all, or the sample."""
    return fabric_pairs(nics) if all_pairs else sample_pairs(nics)


def unreachable_pairs(lab: Lab, timeout_s: float = 2.0, resend_s: float = 0.25,
                      pairs: list[tuple[int, int]] | None = None) -> list[tuple[str, str]]:
    """(src NIC, dst NIC) labels of every pair (indexes into fabric_nics; default all of them)
    whose echo got no reply within timeout_s.

    NICs of one host are not paired: the kernel delivers that traffic locally, and on
    a real server it would cross NVLink or PCIe, not the fabric.
    """
    nics = fabric_nics(lab.fabric)
    sockets = {}
    try:
        for number, nic in enumerate(nics):
            sockets[number] = _open_socket(lab, nic)
        base_id = os.getpid() & 0x7FFF
        pending = set(fabric_pairs(nics) if pairs is None else pairs)
        by_fd = {sock.fileno(): number for number, sock in sockets.items()}
        deadline = time.monotonic() + timeout_s
        next_send = 0.0
        while pending and time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_send:
                for src, dst in pending:
                    try:
                        sockets[src].sendto(_echo(base_id + src, dst), (nics[dst].address, 0))
                    except OSError:
                        pass  # no route yet: stays pending
                next_send = now + resend_s
            ready, _, _ = select.select(list(sockets.values()), [], [], min(resend_s, max(0.0, deadline - now)))
            for sock in ready:
                src = by_fd[sock.fileno()]
                while True:
                    try:
                        packet = sock.recv(2048)
                    except BlockingIOError:
                        break
                    ihl = (packet[0] & 0x0F) * 4
                    kind, _code, _sum, ident, seq = struct.unpack("!BBHHH", packet[ihl:ihl + 8])
                    if kind == 0 and ident == base_id + src and seq < len(nics):
                        pending.discard((src, seq))
        return sorted((nics[s].label, nics[d].label) for s, d in pending)
    finally:
        for sock in sockets.values():
            sock.close()
