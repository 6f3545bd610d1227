"""Real UDP traffic between host NICs, sent and counted in-process (sockets opened inside the
host namespaces and bound to the NIC): the twin's built-in way to see what a fault does."""

from __future__ import annotations

import select
import socket
import struct
import time
from dataclasses import dataclass

from .nsutil import socket_in
from .reach import Nic
from .runtime import Runtime

SO_BINDTODEVICE = 25
DST_PORT = 47000
PAYLOAD = 64


@dataclass(frozen=True)
class BurstResult:
    sent: int
    received: int
    max_delay_s: float  # longest one-way wait seen by a packet (send to receive, same clock)
    damaged: int = 0  # datagrams that reached the application with a payload not as sent

    @property
    def loss_pct(self) -> float:
        return 100.0 * (self.sent - self.received) / self.sent if self.sent else 0.0


def bound_udp_socket(runtime: Runtime, nic: Nic, port: int) -> socket.socket:
    """A UDP socket in the NIC's host namespace, bound to the NIC (address and device)."""
    sock = socket_in(runtime.netns_path(nic.host), socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, nic.ifname.encode())
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((nic.address, port))
    return sock


def udp_burst(runtime: Runtime, src: Nic, dst: Nic, packets: int, source_ports: int = 32,
              pps: float = 20000, settle_s: float = 1.0) -> BurstResult:
    """Send `packets` datagrams from src to dst over `source_ports` flows at about `pps`;
    count what arrives (waiting `settle_s` after the last send)."""
    receiver = bound_udp_socket(runtime, dst, DST_PORT)
    senders = [bound_udp_socket(runtime, src, 0) for _ in range(source_ports)]
    receiver.setblocking(False)
    seen, delays, damaged = set(), [], [0]
    start = time.monotonic()

    def drain() -> None:
        while True:
            try:
                data = receiver.recv(2048)
            except BlockingIOError:
                return
            seq, sent_at = struct.unpack("!Id", data[:12])
            if seq >= packets or len(data) != PAYLOAD or any(data[12:]):
                damaged[0] += 1
                continue
            seen.add(seq)
            delays.append(time.monotonic() - sent_at)

    try:
        for seq in range(packets):
            due = start + seq / pps
            while time.monotonic() < due:
                drain()
                time.sleep(min(0.001, max(0.0, due - time.monotonic())))
            payload = struct.pack("!Id", seq, time.monotonic()).ljust(PAYLOAD, b"\0")
            senders[seq % source_ports].sendto(payload, (dst.address, DST_PORT))
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            select.select([receiver], [], [], 0.05)
            drain()
        return BurstResult(packets, len(seen), max(delays, default=0.0), damaged[0])
    finally:
        receiver.close()
        for sock in senders:
            sock.close()
