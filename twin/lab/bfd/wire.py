"""The two wire formats of the BFD data plane: FRR's distributed-BFD protocol between bfdd and us
(bfdd/bfddp_packet.h, version 1 as FRR 8.4 speaks it; network byte order) and the BFD control
packet itself (RFC 5880 section 4.1). Pure: bytes in, fields out."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

DP_VERSION = 1
HEADER = struct.Struct("!BBHHH")  # version, zero, type, id, length (of the whole message)
# flags, src, dst, lid, min_tx, min_rx, min_echo_tx, min_echo_rx, hold_time, ttl, detect_mult, zero,
# ifindex, ifname[64]
SESSION = struct.Struct("!I16s16sIIIIIIBBHI64s")
STATE_CHANGE = struct.Struct("!IIIIIIBBBx")  # padded as the C struct is (28 bytes)
COUNTERS_REQUEST = struct.Struct("!I")
COUNTERS = struct.Struct("!I4xQQQQQQQQ")  # lid, control in bytes/packets, out, echo in, out


class MessageType(IntEnum):
    ECHO_REQUEST = 0
    ECHO_REPLY = 1
    DP_ADD_SESSION = 2
    DP_DELETE_SESSION = 3
    BFD_STATE_CHANGE = 4
    DP_REQUEST_SESSION_COUNTERS = 5
    BFD_SESSION_COUNTERS = 6


class SessionFlag:
    MULTIHOP = 1 << 0
    DEMAND = 1 << 1
    CBIT = 1 << 2
    ECHO = 1 << 3
    IPV6 = 1 << 4
    PASSIVE = 1 << 5
    SHUTDOWN = 1 << 6


class State(IntEnum):
    ADMIN_DOWN = 0
    DOWN = 1
    INIT = 2
    UP = 3


class Diag(IntEnum):
    NONE = 0
    CONTROL_EXPIRED = 1
    NEIGHBOR_DOWN = 3
    ADMIN_DOWN = 7


@dataclass(frozen=True)
class SessionConfig:
    """What bfdd asks of one session (DP_ADD_SESSION, also sent again when a setting changes)."""
    lid: int
    flags: int
    src: str
    dst: str
    min_tx_us: int
    min_rx_us: int
    detect_mult: int
    ttl: int
    ifindex: int
    ifname: str

    @property
    def multihop(self) -> bool:
        return bool(self.flags & SessionFlag.MULTIHOP)

    @property
    def shutdown(self) -> bool:
        return bool(self.flags & SessionFlag.SHUTDOWN)

    @property
    def passive(self) -> bool:
        return bool(self.flags & SessionFlag.PASSIVE)


def _address(raw: bytes, ipv6: bool) -> str:
    # bfdd keeps an IPv4 address in the first four bytes of its in6_addr
    return socket.inet_ntop(socket.AF_INET6, raw) if ipv6 else socket.inet_ntop(socket.AF_INET, raw[:4])


def _raw_address(address: str, ipv6: bool) -> bytes:
    if ipv6:
        return socket.inet_pton(socket.AF_INET6, address)
    return socket.inet_pton(socket.AF_INET, address).ljust(16, b"\0")


def split_messages(buffer: bytearray) -> list[tuple[int, int, bytes]]:
    """Take every whole message off the front of `buffer`: (type, id, payload) each. A message
    shorter than its header, or of another protocol version, raises ValueError (the stream is lost)."""
    messages = []
    while len(buffer) >= HEADER.size:
        version, _zero, kind, ident, length = HEADER.unpack_from(buffer)
        if version != DP_VERSION or length < HEADER.size:
            raise ValueError(f"not a BFD data plane message (version {version}, length {length})")
        if len(buffer) < length:
            break
        messages.append((kind, ident, bytes(buffer[HEADER.size:length])))
        del buffer[:length]
    return messages


def parse_session(payload: bytes) -> SessionConfig:
    (flags, src, dst, lid, min_tx, min_rx, _echo_tx, _echo_rx, _hold, ttl, mult, _zero, ifindex,
     ifname) = SESSION.unpack_from(payload)
    ipv6 = bool(flags & SessionFlag.IPV6)
    return SessionConfig(lid=lid, flags=flags, src=_address(src, ipv6), dst=_address(dst, ipv6),
                         min_tx_us=min_tx, min_rx_us=min_rx, detect_mult=mult, ttl=ttl, ifindex=ifindex,
                         ifname=ifname.split(b"\0", 1)[0].decode(errors="replace"))


def session_message(config: SessionConfig, kind: MessageType = MessageType.DP_ADD_SESSION, ident: int = 0) -> bytes:
    """What bfdd sends (the tests play bfdd with it)."""
    ipv6 = bool(config.flags & SessionFlag.IPV6)
    payload = SESSION.pack(config.flags, _raw_address(config.src, ipv6), _raw_address(config.dst, ipv6),
                           config.lid, config.min_tx_us, config.min_rx_us, 0, 0, 0, config.ttl,
                           config.detect_mult, 0, config.ifindex, config.ifname.encode())
    return message(kind, payload, ident)


def message(kind: MessageType, payload: bytes, ident: int = 0) -> bytes:
    return HEADER.pack(DP_VERSION, 0, kind, ident, HEADER.size + len(payload)) + payload


def state_change(lid: int, remote: ControlPacket | None, state: State) -> bytes:
    """Tell bfdd the session's local state, with what the peer last said about itself."""
    if remote is None:
        payload = STATE_CHANGE.pack(lid, 0, 0, 0, 0, 0, state, 0, 0)
    else:
        payload = STATE_CHANGE.pack(lid, remote.my_discr, 0, remote.desired_min_tx_us, remote.required_min_rx_us,
                                    remote.required_min_echo_rx_us, state, remote.diag, remote.detect_mult)
    return message(MessageType.BFD_STATE_CHANGE, payload)


def parse_state_change(payload: bytes) -> tuple[int, int, State]:
    """(lid, remote discriminator, local state): what bfdd reads of it (the tests check it)."""
    lid, rid, _flags, _tx, _rx, _echo, state, _diag, _mult = STATE_CHANGE.unpack_from(payload)
    return lid, rid, State(state)


def counters_reply(ident: int, lid: int, rx_packets: int, tx_packets: int) -> bytes:
    size = CONTROL.size
    payload = COUNTERS.pack(lid, rx_packets * size, rx_packets, tx_packets * size, tx_packets, 0, 0, 0, 0)
    return message(MessageType.BFD_SESSION_COUNTERS, payload, ident)


# RFC 5880 4.1: version/diag, state/flags, detect mult, length, my/your discriminator, desired min
# TX, required min RX, required min echo RX (microseconds)
CONTROL = struct.Struct("!BBBBIIIII")
BFD_VERSION = 1
_STATES = tuple(State)  # by value: indexing is cheaper than State(value) on every packet
POLL, FINAL, CPI, AUTH, DEMAND, MULTIPOINT = 0x20, 0x10, 0x08, 0x04, 0x02, 0x01


class ControlPacket(NamedTuple):
    """A tuple, not a dataclass: one is made for every packet sent and received (a frozen
    dataclass's construction costs several times a tuple's)."""
    state: State
    diag: int
    detect_mult: int
    my_discr: int
    your_discr: int
    desired_min_tx_us: int
    required_min_rx_us: int
    required_min_echo_rx_us: int = 0
    poll: bool = False
    final: bool = False

    def pack(self) -> bytes:
        flags = (self.state << 6) | (POLL if self.poll else 0) | (FINAL if self.final else 0)
        return CONTROL.pack((BFD_VERSION << 5) | self.diag, flags, self.detect_mult, CONTROL.size, self.my_discr,
                            self.your_discr, self.desired_min_tx_us, self.required_min_rx_us,
                            self.required_min_echo_rx_us)


def parse_control(data: bytes) -> ControlPacket | None:
    """A received control packet, or None when RFC 5880 6.8.6 says discard it (authentication,
    which the lab never configures, included)."""
    if len(data) < CONTROL.size:
        return None
    vers_diag, flags, mult, length, my_discr, your_discr, tx, rx, echo = CONTROL.unpack_from(data)
    state = _STATES[flags >> 6]
    if (vers_diag >> 5) != BFD_VERSION or length < CONTROL.size or length > len(data) or mult == 0 \
            or flags & (MULTIPOINT | AUTH) or my_discr == 0 \
            or (your_discr == 0 and state not in (State.DOWN, State.ADMIN_DOWN)):
        return None
    return ControlPacket(state=state, diag=vers_diag & 0x1F, detect_mult=mult, my_discr=my_discr,
                         your_discr=your_discr, desired_min_tx_us=tx, required_min_rx_us=rx,
                         required_min_echo_rx_us=echo, poll=bool(flags & POLL), final=bool(flags & FINAL))
