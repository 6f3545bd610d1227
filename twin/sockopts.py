"""Linux socket options Python's socket module does not name, and the socket error queue, in one
place (the probe agent, hash dodging, the flows and the RoCE NIC's path discovery use them).

Path discovery sends TTL-limited datagrams from a flow's own socket: each switch on the way answers
ICMP time-exceeded from its ingress address, and the kernel queues the answer, with the quoted
datagram, on the sending socket (IP_RECVERR). With IP_RECVERR a queued error is also reported once
by the socket's next send, which then sends nothing; reading the error queue clears it.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

SO_RCVBUFFORCE = 33  # asm-generic/socket.h: root may set a receive buffer past net.core.rmem_max
IP_RECVERR = 11  # linux/in.h; not exported by the socket module
SO_EE_ORIGIN_ICMP = 2
ICMP_TIME_EXCEEDED = 11
ICMP_DEST_UNREACH = 3  # a switch with no route for the datagram says so (the lab's switches are not rate limited)
EXTENDED_ERR = struct.Struct("=IBBBBII")  # struct sock_extended_err
IP_UNICAST_IF = 50  # linux/in.h: the interface unicast from this socket leaves by
SO_TIMESTAMPNS = 35  # asm-generic/socket.h (SO_TIMESTAMPNS_OLD): each datagram's receive time, as ancillary data
TIMESPEC = struct.Struct("=qq")  # struct timespec on a 64-bit kernel: seconds, nanoseconds (CLOCK_REALTIME)
ARRIVAL_SPACE = socket.CMSG_SPACE(TIMESPEC.size)  # recvmsg's ancillary buffer for that time
DEFAULT_TTL = 64
SEND_ATTEMPTS = 4


def bind_device(sock: socket.socket, device: str | None) -> None:
    """Keep the socket's traffic on one interface (SO_BINDTODEVICE); None: where the routes take it
    (a dual-port NIC's sockets, model/nics.py `Nic.device`)."""
    if device:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())


def send_from(sock: socket.socket, index: int) -> None:
    """Unicast from this socket leaves by interface `index` (its receiving is not restricted);
    a connected socket is connected again, so that its cached route is looked up anew."""
    sock.setsockopt(socket.IPPROTO_IP, IP_UNICAST_IF, struct.pack("!I", index))
    try:
        peer = sock.getpeername()
    except OSError:  # not connected
        return
    sock.connect(peer)


def send_from_port(sock: socket.socket, ifname: str) -> None:
    """Unicast from this socket leaves by the interface named `ifname` of the caller's namespace."""
    send_from(sock, socket.if_nametoindex(ifname))


def stamp_arrivals(sock: socket.socket) -> None:
    """The kernel stamps each datagram for this socket when it arrives in the namespace (the
    receiving interface's netif_receive), read back by arrival_time: a reader that wakes late
    still learns when its datagram came."""
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def arrival_time(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The receive time (CLOCK_REALTIME seconds) recvmsg returned with a datagram of a socket
    stamp_arrivals set; None without one."""
    for level, ctype, data in ancillary:
        if level == socket.SOL_SOCKET and ctype == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            seconds, nanoseconds = TIMESPEC.unpack_from(data)
            return seconds + nanoseconds / 1e9
    return None


def report_errors(sock: socket.socket, on: bool = True) -> None:
    sock.setsockopt(socket.SOL_IP, IP_RECVERR, int(on))


def send(sock: socket.socket, payload: bytes, address: tuple[str, int], ttl: int = DEFAULT_TTL) -> bool:
    """Send one datagram (a TTL other than the default goes as ancillary data, so other senders on
    the socket keep theirs). A failed send may only have reported a queued ICMP error (see
    above) and sent nothing, so it is tried again; another answer can be queued meanwhile (a path
    discovery under way), so up to SEND_ATTEMPTS times; False if every try fails (no route)."""
    for _attempt in range(SEND_ATTEMPTS):
        try:
            if ttl == DEFAULT_TTL:
                sock.sendto(payload, address)
            else:
                sock.sendmsg([payload], [(socket.SOL_IP, socket.IP_TTL, struct.pack("i", ttl))], 0, address)
            return True
        except OSError:
            continue
    return False


def icmp_errors(sock: socket.socket) -> Iterator[tuple[bytes, str, int]]:
    """Drain the socket's error queue: (quoted payload, offender address, ICMP type) per ICMP answer."""
    while True:
        try:
            data, ancillary, _flags, _addr = sock.recvmsg(512, 512, socket.MSG_ERRQUEUE)
        except OSError:  # BlockingIOError: the queue is empty
            return
        for level, ctype, cdata in ancillary:
            if level != socket.SOL_IP or ctype != IP_RECVERR or len(cdata) < EXTENDED_ERR.size + 8:
                continue
            _errno, origin, icmp_type, _code, _pad, _info, _data = EXTENDED_ERR.unpack_from(cdata)
            if origin == SO_EE_ORIGIN_ICMP:
                yield data, socket.inet_ntoa(cdata[EXTENDED_ERR.size + 4:EXTENDED_ERR.size + 8]), icmp_type


def time_exceeded(sock: socket.socket) -> Iterator[tuple[bytes, str]]:
    """Drain the socket's error queue: (quoted payload, offender address) per time-exceeded answer."""
    for data, offender, icmp_type in icmp_errors(sock):
        if icmp_type == ICMP_TIME_EXCEEDED:
            yield data, offender
