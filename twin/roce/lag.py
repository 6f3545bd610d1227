"""A dual-port NIC's QPs over its two ports, as a RoCE LAG places them (mlx5's queue affinity:
each QP has a port, assigned in turn, and the QPs of a port that goes down move to the other
until it comes back). The kernel's ECMP hash over a handful of QPs often put three of four on one
port (every host of a 4-rank ring at least once in a 2x25 Mbit/s lab), so the ring ran at one port's
rate; in turn, two QPs per connection use both.

A socket sends from its port by IP_UNICAST_IF, not SO_BINDTODEVICE, which would also keep it from
receiving what its peer's packets arrive on the other port (the far side's routes pick it): every
QP timed out. A connected socket keeps the route it cached; it is connected again to its peer when
it moves, which drops that route. A port's index and carrier are read with SIOCGIFINDEX and
SIOCGIFFLAGS (IFF_RUNNING) from a socket in the NIC's namespace (a tool driving several hosts'
NICs from one process is in none of them)."""

from __future__ import annotations

import fcntl
import socket
import struct
from collections.abc import Callable

from twin.sockopts import send_from

CARRIER_CHECK_S = 0.02  # how often the NIC looks at its ports' carrier (a LAG hears of a port in microseconds)
SIOCGIFFLAGS, SIOCGIFINDEX = 0x8913, 0x8933
IFF_RUNNING = 0x40
IFREQ_FLAGS = struct.Struct("16sH22x")
IFREQ_INDEX = struct.Struct("16si20x")


def has_carrier(sock: socket.socket, ifname: str) -> bool:
    _name, flags = IFREQ_FLAGS.unpack(fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, IFREQ_FLAGS.pack(ifname.encode(), 0)))
    return bool(flags & IFF_RUNNING)


def interface_index(sock: socket.socket, ifname: str) -> int:
    _name, index = IFREQ_INDEX.unpack(fcntl.ioctl(sock.fileno(), SIOCGIFINDEX, IFREQ_INDEX.pack(ifname.encode(), 0)))
    return index


class PortAffinity:
    """Which port each of the NIC's sockets sends from: its own (`place`), or another while its own
    has no carrier (`follow_carrier`, from the NIC's thread)."""

    def __init__(self, ports: tuple[str, ...], new_socket: Callable[[], socket.socket]):
        self.ports = ports
        self.probe = new_socket()  # asks the kernel for the ports' flags, in the NIC's namespace
        self.index = {port: interface_index(self.probe, port) for port in ports}
        self.placed: list[list] = []  # [socket, its own port, the port it is on now]
        self.up = set(ports)
        self.checked_at = float("-inf")

    def place(self, sock: socket.socket, lane: int) -> None:
        own = self.ports[lane % len(self.ports)]
        now = own if own in self.up or not self.up else sorted(self.up)[0]
        send_from(sock, self.index[now])
        self.placed.append([sock, own, now])

    def follow_carrier(self, now: float) -> set[int]:
        """Move sockets as the ports' carrier says; returns the file descriptors of those that left a
        port without carrier (what they had queued there was dropped with it)."""
        if now - self.checked_at < CARRIER_CHECK_S:
            return set()
        self.checked_at = now
        up = {port for port in self.ports if has_carrier(self.probe, port)}
        if up == self.up:
            return set()
        self.up = up
        self.placed = [entry for entry in self.placed if entry[0].fileno() >= 0]  # closed ones gone
        fled = set()
        for entry in self.placed:
            sock, own, current = entry
            wanted = own if own in up else sorted(up)[0] if up else current
            if wanted != current:
                send_from(sock, self.index[wanted])
                entry[2] = wanted
                if current not in up:
                    fled.add(sock.fileno())
        return fled

    def close(self) -> None:
        self.probe.close()
