"""A reader of a BPF ring buffer map (BPF_MAP_TYPE_RINGBUF), as libbpf's ring_buffer__consume does.

Layout (kernel/bpf/ringbuf.c): page 0 holds the consumer position (ours to write), page 1 the
producer position, then the data area, mapped twice in a row so a record never wraps. Each
record has an 8-byte header: its length with a busy and a discard bit, then the page offset.
The map's file descriptor polls readable when records are waiting.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator

BUSY_BIT, DISCARD_BIT = 1 << 31, 1 << 30
HEADER = 8


class RingBuffer:
    def __init__(self, fd: int, size: int):
        self.fd, self.size, self.mask = fd, size, size - 1
        page = mmap.PAGESIZE
        self._consumer = mmap.mmap(fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._producer = mmap.mmap(fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        self._page = page

    def records(self) -> Iterator[bytes]:
        """Every committed record, oldest first; each is released once the next is asked for."""
        consumer = struct.unpack_from("<Q", self._consumer, 0)[0]
        while True:
            producer = struct.unpack_from("<Q", self._producer, 0)[0]
            if consumer >= producer:
                return
            start = self._page + (consumer & self.mask)
            length = struct.unpack_from("<I", self._producer, start)[0]
            if length & BUSY_BIT:  # reserved, not yet committed
                return
            size = length & ~(BUSY_BIT | DISCARD_BIT)
            if not length & DISCARD_BIT:
                yield bytes(self._producer[start + HEADER:start + HEADER + size])
            consumer += (size + HEADER + 7) & ~7
            struct.pack_into("<Q", self._consumer, 0, consumer)

    def close(self) -> None:
        self._consumer.close()
        self._producer.close()
