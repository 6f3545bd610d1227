"""The Internet checksum (RFC 1071), for the packets the project writes itself: ICMP echoes
(lab/reach.py), TCP probes (collectives/tcp_state.py), BFD frames for the kernel (lab/bfd/fastpath.py)."""

from __future__ import annotations

import struct


def checksum(data: bytes) -> int:
    """The ones' complement of the ones' complement sum of `data`'s 16-bit words (an odd last byte
    padded with zero): written into a header, the header then sums to zero."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
