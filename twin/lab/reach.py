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

from twin.inet import checksum
from twin.lab.handle import Lab
from twin.model.nics import Nic, fabric_nics, fabric_pairs
from twin.sockopts import SO_RCVBUFFORCE, bind_device

SOL_RAW = 255
ICMP_FILTER = 1  # SOL_RAW option of raw ICMP sockets: a bitmask of the ICMP types to drop
ECHO_REPLY = 0
RCVBUF = 8 << 20


def _echo(ident: int, seq: int) -> bytes:
    payload = b"fabric-twin-reach"
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    return struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, seq) + payload


def _open_socket(lab: Lab, nic: Nic) -> socket.socket:
    sock = lab.socket(nic.host, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    bind_device(sock, nic.device)
    # A raw socket gets a copy of every ICMP packet its NIC receives: in pod128 each NIC takes 255
    # echo requests and 255 replies per round, more than the default 208 KB buffer holds, and the
    # replies it dropped were counted as unreachable pairs. Keep only replies, in a larger buffer.
    sock.setsockopt(SOL_RAW, ICMP_FILTER, struct.pack("=I", 0xFFFFFFFF & ~(1 << ECHO_REPLY)))
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
    sock.bind((nic.address, 0))
    sock.setblocking(False)
    return sock


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
            if lab.fabric.runs_here(nic.host):  # a split lab's share sends from its own hosts
                sockets[number] = _open_socket(lab, nic)
        base_id = os.getpid() & 0x7FFF
        pending = {pair for pair in (fabric_pairs(nics) if pairs is None else pairs) if pair[0] in sockets}
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
