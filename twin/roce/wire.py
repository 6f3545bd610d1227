"""The packets of the emulated transport: a header modelled on RoCEv2's base transport header
(opcode, destination QP, packet sequence number), plus where the payload goes in its message.

    DATA  one MTU-sized piece of a message: msg (its number on the QP), offset, length of the
          whole message; `last` flag on its final piece
    ACK   cumulative: every PSN below `psn` has arrived in order
    NAK   sequence error: `psn` is the one expected; resend from it (go-back-N)
    CNP   congestion notification: the receiver saw a packet of this QP marked CE (DCQCN)
    SACK  selective (multipath QPs, selective.py): every PSN below `psn` has arrived, and so has
          the one in `msg`, and of the SACK_BITS PSNs below that one those whose bit is set in
          `offset` (bits 0-31) and `msg_len` (32-63), bit i for PSN msg - 1 - i (Ultra
          Ethernet's SACK bitmap): a SACK lost on the way back costs nothing the next one
          does not tell
    TRACE path discovery (paths.py): sent with a short TTL, `psn` is the TTL, `msg` the sending QP;
          the switches answer it, a peer ignores it
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

HEADER = struct.Struct("!BBHIIIII")  # magic, opcode, flags, qpn, psn, msg, offset, msg_len
MAGIC = 0xC5
DATA, ACK, NAK, CNP, SACK, TRACE = 1, 2, 3, 4, 5, 6
LAST = 1
# The DSCP a multipath QP's packets carry: "the receiver takes these out of order", so a switch
# balancing adaptively may move them (the switch's side: lab/ebpf/queues.h, tests/unit/test_bpf_layout.py)
REORDERABLE_DSCP = 10
IP_UDP_HEADERS = 20 + 8


@dataclass(frozen=True)
class Header:
    opcode: int
    qpn: int
    psn: int
    msg: int = 0
    offset: int = 0
    msg_len: int = 0
    flags: int = 0

    def pack(self) -> bytes:
        return HEADER.pack(MAGIC, self.opcode, self.flags, self.qpn, self.psn, self.msg, self.offset, self.msg_len)


SACK_BITS = 64


def sack(qpn: int, cumulative: int, psn: int, bits: int) -> Header:
    """A SACK to QP `qpn`: below `cumulative` everything arrived, `psn` too, and bit i of `bits`
    says whether PSN psn - 1 - i did."""
    return Header(SACK, qpn, cumulative, msg=psn, offset=bits & 0xFFFFFFFF, msg_len=bits >> 32)


def sack_bits(header: Header) -> int:
    return header.offset | header.msg_len << 32


def unpack(data, at: int = 0) -> Header | None:
    """The header at `at`, or None for a datagram that is not ours."""
    if len(data) - at < HEADER.size:
        return None
    magic, opcode, flags, qpn, psn, msg, offset, msg_len = HEADER.unpack_from(data, at)
    if magic != MAGIC:
        return None
    return Header(opcode, qpn, psn, msg, offset, msg_len, flags)


def payload_per_packet(mtu: int) -> int:
    """Message bytes one packet carries at this MTU (IP, UDP and our header take the rest)."""
    return mtu - IP_UDP_HEADERS - HEADER.size
