"""The gate of a port: the TBF under its HTB data class (model/queue_tree.py), open far above the line rate
(HTB shapes) or closed to a trickle (paused), switched by one netlink message.

A port's controller must act within a fraction of a millisecond, so every message is encoded once
(pyroute2's tcmsg) and sent on a raw netlink socket of the port's namespace without waiting for
the acknowledgement: about 1 us a message, against 380 us for a pyroute2 request. Errors still
come back on the socket and are collected by `errors()`.

Why TBF: it sends a packet only with the tokens in hand, so a closed gate holds its queue without
running up a debt (pausing HTB's own class rate charged the class seconds of tokens), and a
change refills its bucket, so one frame passes as a pause takes hold, like a frame already on the
wire when a pause frame arrives. The closed rate lets one frame through every ~1 s: pyroute2
encodes TBF's bucket as time, which the kernel caps at 4.29 s, and the bucket must hold a frame.

A gate opened while no new packet arrives would wait for TBF's own timer (up to a second) before
sending its queue: opening is followed by a kick, an ARP request for the peer's address sent on
the port (a control-class packet, never paused), whose enqueue runs the port's qdisc at once.
Running the qdisc means forwarding its backlog, in the softirq of whoever sent the kick, for up
to milliseconds: the kicks are sent by a child process at normal priority (Kicker), never by the
real-time controller, whose next reaction would wait behind that work.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
from collections.abc import Iterator
from functools import cache
from typing import NamedTuple

from pyroute2.netlink import NLM_F_REQUEST
from pyroute2.netlink.rtnl import RTM_NEWQDISC
from pyroute2.netlink.rtnl.tcmsg import plugins, tcmsg

from twin.lab.handle import Lab
from twin.lab.kernel import nlbatch
from twin.lab.kernel.nsutil import interface_indexes, interface_macs
from twin.model import queue_tree
from twin.model.buffers import frame_bytes, queue_limit
from twin.model.ports import Port

CLOSED_RATE = "64kbit"  # 8 kB/s: a jumbo frame's bucket is 1.15 s, under the 4.29 s cap
# The closed bucket holds one frame: TBF drops a packet larger than its bucket, and the bucket
# comes back from its time encoding a byte short, so it gets a margin.
CLOSED_BURST_MARGIN = 64
ETH_P_ARP = 0x0806


def tbf_options(rate: str, burst: int, limit: int) -> dict:
    return plugins["tbf"].get_parameters({"rate": rate, "burst": burst, "limit": limit})


def _message(index: int, options: tuple[str, int, int], sequence: int) -> bytes:
    """The gate's request (TBF rate, burst, limit) for interface `index`: encoded once per options
    (nlbatch), as pod128 has 9,000 of them."""
    message = bytearray(_template(options, sequence))
    nlbatch.INDEX.pack_into(message, nlbatch.INDEX_OFFSET, index)
    return bytes(message)


@cache
def _template(options: tuple[str, int, int], sequence: int) -> bytes:
    msg = tcmsg()
    msg["index"], msg["handle"], msg["parent"] = 0, queue_tree.GATE_HANDLE, queue_tree.CLASS_HANDLE
    msg["attrs"] = [["TCA_KIND", "tbf"], ["TCA_OPTIONS", tbf_options(*options)]]
    msg["header"]["type"], msg["header"]["flags"] = RTM_NEWQDISC, NLM_F_REQUEST
    msg["header"]["sequence_number"] = sequence
    msg.encode()
    return bytes(msg.data)


def _arp_request(mac: bytes, own_ip: str, peer_ip: str) -> bytes:
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + socket.inet_aton(own_ip) + bytes(6) + \
        socket.inet_aton(peer_ip)
    return b"\xff" * 6 + mac + struct.pack("!H", ETH_P_ARP) + arp


def _sends(messages: list[bytes]) -> Iterator[bytes]:
    """`messages` joined into the sends nlbatch.spans allows: a gate's message carries TBF's rate
    table, so an AIPod superspine's 256 gates in one send (290 KB) failed whole (EMSGSIZE)."""
    for start, end in nlbatch.spans([len(m) for m in messages]):
        yield b"".join(messages[start:end])


PR_SET_PDEATHSIG = 1
KICK = struct.Struct("<I")


class Kick(NamedTuple):
    """A port's kick: its frame, sent on `ifname` by its namespace's packet socket."""
    sock: socket.socket
    ifname: str
    frame: bytes

    def send(self) -> None:
        self.sock.sendto(self.frame, (self.ifname, ETH_P_ARP))


class Kicker:
    """A child process that sends kick frames, asked by port number over a pipe."""

    def __init__(self, kicks: list[Kick]):
        read_end, self.pipe = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: normal priority, gone with its parent
            try:
                os.close(self.pipe)
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
                ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                with os.fdopen(read_end, "rb", buffering=0) as pipe:
                    while data := pipe.read(KICK.size * 256):
                        for (number,) in KICK.iter_unpack(data[:len(data) // KICK.size * KICK.size]):
                            try:
                                kicks[number].send()
                            except OSError:  # the port is down: nothing waits behind its gate
                                pass
            finally:
                os._exit(0)
        os.close(read_end)
        fcntl.fcntl(self.pipe, fcntl.F_SETFL, os.O_NONBLOCK)
        self.dropped = 0

    def kick(self, numbers: list[int]) -> None:
        try:
            os.write(self.pipe, b"".join(KICK.pack(n) for n in numbers))
        except BlockingIOError:  # 16k kicks waiting: the kicker is starved, the gates' timers will do
            self.dropped += len(numbers)

    def stop(self) -> None:
        os.close(self.pipe)
        os.waitpid(self.pid, 0)


class _PortGate:
    def __init__(self, netlink: socket.socket, index: int, closed_burst: int, limit: int, number: int):
        self.netlink, self.index, self.closed_burst, self.number = netlink, index, closed_burst, number
        self.encode(limit)

    def encode(self, limit: int) -> None:
        """The closing and opening messages, each with the queue's limit (its TBF holds that much)."""
        self.limit = limit
        self.close_msg = _message(self.index, (CLOSED_RATE, self.closed_burst, limit), 1)
        self.open_msg = _message(self.index, (queue_tree.GATE_OPEN_RATE, queue_tree.GATE_OPEN_BURST, limit), 2)


class Gates:
    """Every port's gate, switched from one process (the PFC controller)."""

    def __init__(self, lab: Lab):
        self.lab, self.fabric = lab, lab.fabric
        self._netlink: dict[str, socket.socket] = {}
        self._gates: dict[Port, _PortGate] = {}
        self._indexes: dict[str, dict[str, int]] = {}
        self._packet: dict[str, socket.socket] = {}  # a namespace's socket for the kicks
        self._kicks: list[Kick] = []  # by port number
        self.kicker: Kicker | None = None
        self.sent = 0
        self._pending: dict[socket.socket, list[bytes]] = {}  # messages to send at flush(), per namespace
        self._pending_kicks: list[int] = []

    def open_ports(self, ports: list[Port]) -> None:
        """Resolve indexes and addresses and encode every message once."""
        by_node: dict[str, list[Port]] = {}
        for port in ports:
            by_node.setdefault(port.node, []).append(port)
        for node, node_ports in by_node.items():
            with self.lab.enter(node):
                netlink = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
                netlink.bind((0, 0))
                netlink.setblocking(False)
                # One unbound socket of protocol 0 a namespace, each send naming the port and the
                # frame's protocol (Kick.send): protocol 0 never hooks into reception (a socket of
                # ETH_P_ARP is hooked on every device).
                # Not one bound to each port: binding and closing a packet socket each wait for an
                # RCU grace period (7 ms here: 11 of pod64's 22 s of controller start), and
                # AIPod's 20,480 ports are more than a process may hold open (20,000 here).
                packet = self._packet[node] = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            self._netlink[node] = netlink
            indexes = self._indexes[node] = interface_indexes(self.lab.netns(node))
            macs = interface_macs(self.lab.netns(node))
            for port in node_ports:
                own, other = self._addresses(port)
                self._gates[port] = _PortGate(netlink, indexes[port.ifname],
                                              frame_bytes(self.fabric.mtu) + CLOSED_BURST_MARGIN,
                                              queue_limit(self.fabric, port), len(self._kicks))
                self._kicks.append(Kick(packet, port.ifname, _arp_request(macs[port.ifname], own, other)))

    def start_kicker(self) -> None:
        """Fork the kicker (before the caller turns real-time and before other threads exist)."""
        self.kicker = Kicker(self._kicks)

    def indexes(self, node: str) -> dict[str, int]:
        """ifname -> interface index in the node's namespace."""
        return self._indexes[node]

    def _addresses(self, port: Port) -> tuple[str, str]:
        link = next(each for each in self.fabric.links_of(port.node) if each.endpoint(port.node).ifname == port.ifname)
        return str(link.endpoint(port.node).address.ip), str(link.peer(port.node).address.ip)

    def close(self, port: Port) -> None:
        """Queue the closing message (sent, in order, by flush())."""
        gate = self._gates[port]
        self._pending.setdefault(gate.netlink, []).append(gate.close_msg)

    def open(self, port: Port) -> None:
        """Queue the opening message and the kick that follows it."""
        gate = self._gates[port]
        self._pending.setdefault(gate.netlink, []).append(gate.open_msg)
        self._pending_kicks.append(gate.number)

    def limit(self, port: Port) -> int:
        return self._gates[port].limit

    def set_limit(self, port: Port, limit: int, closed: bool) -> None:
        """Give the port's queue another limit (a queue that leaves the lossless class drops at
        its buffer), keeping the gate as it is: queues the message, sent by flush()."""
        gate = self._gates[port]
        gate.encode(limit)
        self._pending.setdefault(gate.netlink, []).append(gate.close_msg if closed else gate.open_msg)

    def flush(self) -> None:
        """Send what close() and open() queued: one write per namespace (netlink takes several
        messages in one buffer and acts on them in order), then the kicks in one write."""
        for netlink, messages in self._pending.items():
            for send in _sends(messages):
                netlink.send(send)
            self.sent += len(messages)
        self._pending.clear()
        if self._pending_kicks and self.kicker is not None:
            self.kicker.kick(self._pending_kicks)
        self._pending_kicks.clear()

    def errors(self) -> list[str]:
        """Error replies the kernel sent since the last call (an unacknowledged request that failed)."""
        found = []
        for node, netlink in self._netlink.items():
            while True:
                try:
                    data = netlink.recv(65536)
                except BlockingIOError:
                    break
                found += [f"{node}: {os.strerror(code)} ({errno.errorcode.get(code, code)})"
                          for _sequence, code in nlbatch.error_replies(data) if code]
        return found

    def shutdown(self) -> None:
        if self.kicker is not None:
            self.kicker.stop()
        for packet in self._packet.values():
            packet.close()
        for netlink in self._netlink.values():
            netlink.close()
        self._gates.clear()
        self._netlink.clear()
