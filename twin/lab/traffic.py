"""Real UDP traffic between host NICs, sent and counted in-process (sockets opened inside the
host namespaces and bound to the NIC): the twin's built-in way to see what a fault does."""

from __future__ import annotations

import select
import socket
import struct
import time
from dataclasses import dataclass

from twin.lab.handle import Lab
from twin.model.nics import Nic
from twin.sockopts import SO_RCVBUFFORCE, bind_device

DST_PORT = 47000
PAYLOAD = 64
RECEIVE_BUFFER = 32 << 20  # 20,000 datagrams of PAYLOAD at ~1.3 KB of kernel memory each


@dataclass(frozen=True)
class BurstResult:
    sent: int
    received: int
    max_delay_s: float  # longest one-way wait seen by a packet (send to receive, same clock)
    damaged: int = 0  # datagrams that reached the application with a payload not as sent

    @property
    def loss_pct(self) -> float:
        return 100.0 * (self.sent - self.received) / self.sent if self.sent else 0.0


def bound_udp_socket(lab: Lab, nic: Nic, port: int) -> socket.socket:
    """A UDP socket in the NIC's host namespace, bound to the NIC (address and device)."""
    sock = lab.socket(nic.host, socket.SOCK_DGRAM)
    bind_device(sock, nic.device)
    # Room for a whole burst however long the process is kept off the CPU: SO_RCVBUF is capped by
    # net.core.rmem_max (208 KB on a fresh Debian, 4 MB on the benchmark VM: 8 MB of kernel memory,
    # 0.4 s of a 20,000/s burst at about 1 KB a datagram), and a receiver starved for 0.7 s by the
    # other test worker's training job counted its own full buffer as 11 % network loss. FORCE
    # (the twin runs as root) goes past the cap.
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
    sock.bind((nic.address, port))
    return sock


def udp_burst(lab: Lab, src: Nic, dst: Nic, packets: int, source_ports: int = 32,
              pps: float = 20000, settle_s: float = 1.0) -> BurstResult:
    """Send `packets` datagrams from src to dst over `source_ports` flows at about `pps`;
    count what arrives (waiting `settle_s` after the last send)."""
    receiver = bound_udp_socket(lab, dst, DST_PORT)
    senders = [bound_udp_socket(lab, src, 0) for _ in range(source_ports)]
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


TCP_INFO_TOTAL_RETRANS = 100  # struct tcp_info: offset of tcpi_total_retrans (u32)
INCAST_PORT = 47010
CHUNK = 64 * 1024


@dataclass(frozen=True)
class IncastResult:
    seconds: float
    received_bytes: list[int]  # per flow, at the receiver
    retransmits: list[int]  # per flow, TCP's own count at the sender (a lossy fabric drops; PFC never)

    @property
    def goodput_bps(self) -> float:
        return sum(self.received_bytes) * 8 / self.seconds


def tcp_incast(lab: Lab, senders: list[Nic], receiver: Nic, seconds: float,
               flows_per_sender: int = 1) -> IncastResult:
    """Bulk TCP from every sender NIC to one receiver NIC at once (an N:1 incast), for `seconds`;
    bytes counted at the receiver, retransmissions read from each sender's TCP_INFO."""
    import threading

    listener = lab.socket(receiver.host, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((receiver.address, INCAST_PORT))
    listener.listen(len(senders) * flows_per_sender)
    clients = []
    for nic in [n for n in senders for _ in range(flows_per_sender)]:
        sock = lab.socket(nic.host, socket.SOCK_STREAM)
        bind_device(sock, nic.device)
        sock.bind((nic.address, 0))
        clients.append(sock)
    accepted, received = [], [0] * len(senders) * flows_per_sender
    stop = threading.Event()
    try:
        for sock in clients:
            sock.connect((receiver.address, INCAST_PORT))
            accepted.append(listener.accept()[0])

        def drain(number: int) -> None:
            conn = accepted[number]
            conn.settimeout(0.2)
            while not stop.is_set():
                try:
                    data = conn.recv(CHUNK)
                except TimeoutError:
                    continue
                if not data:
                    return
                received[number] += len(data)

        def pump(sock: socket.socket) -> None:
            payload = bytes(CHUNK)
            sock.settimeout(0.2)
            while not stop.is_set():
                try:
                    sock.send(payload)
                except TimeoutError:
                    continue
        threads = [threading.Thread(target=drain, args=(n,), daemon=True) for n in range(len(clients))]
        threads += [threading.Thread(target=pump, args=(s,), daemon=True) for s in clients]
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        counted = list(received)
        stop.set()
        for thread in threads:
            thread.join(timeout=2)
        retransmits = [struct.unpack_from("I", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104),
                                          TCP_INFO_TOTAL_RETRANS)[0] for s in clients]
        return IncastResult(seconds, counted, retransmits)
    finally:
        stop.set()
        for sock in clients + accepted + [listener]:
            sock.close()
