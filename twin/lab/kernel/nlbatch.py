"""Netlink requests encoded once and sent for many interfaces.

pyroute2 spends ~0.35 ms encoding a tc request and the kernel ~0.05 ms carrying it out; a pod128
lab sends nine of them to each of its 4,600 ports, and encoding was most of its bring-up. So
pyroute2 (IPBatch) encodes a request once, for interface index 0; each interface gets a copy with
its index written in (tcmsg and ifinfomsg keep it at the same offset) and a sequence number of its
own, a namespace's copies go out in a few sends, and every acknowledgement is checked.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable, Iterator, Sequence
from functools import cache

from pyroute2 import IPBatch

from twin.errors import RuntimeBackendError
from twin.lab.kernel.nsutil import in_netns
from twin.sockopts import SO_RCVBUFFORCE

HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, pid
INDEX = struct.Struct("=i")
INDEX_OFFSET = HEADER.size + 4  # after the family and padding of tcmsg / ifinfomsg
NLMSG_ERROR = 2
ERROR = struct.Struct("=i")
CHUNK_BYTES = 32 * 1024  # requests per send
# ...and at most this many: each acknowledgement is its own skb, charged ~1 KiB of the socket's
# receive buffer (212 KiB by default) however small, so 32 KiB of small requests (a superspine's
# 256 addresses) overran it (ENOBUFS) and acknowledgements were lost
CHUNK_MESSAGES = 128
RECEIVE_BUFFER = 1 << 20


def aligned(length: int) -> int:
    """A netlink message's length padded to the 4 bytes the next one starts on."""
    return (length + 3) & ~3


def spans(lengths: Sequence[int], max_messages: int | None = None) -> Iterator[tuple[int, int]]:
    """[start, end) runs of consecutive messages (their padded lengths) that go in one send: at
    most CHUNK_BYTES (a send larger than the socket's buffer fails whole, EMSGSIZE) and at most
    `max_messages`, one message at least."""
    start = 0
    while start < len(lengths):
        end, size = start + 1, lengths[start]
        while end < len(lengths) and size + lengths[end] <= CHUNK_BYTES and \
                (max_messages is None or end - start < max_messages):
            size += lengths[end]
            end += 1
        yield start, end
        start = end


def error_replies(data: bytes) -> Iterator[tuple[int, int]]:
    """(sequence number, errno; 0: done) of every error or acknowledgement message in `data`."""
    offset = 0
    while offset + HEADER.size <= len(data):
        length, kind, _flags, sequence, _pid = HEADER.unpack_from(data, offset)
        if kind == NLMSG_ERROR:
            yield sequence, -ERROR.unpack_from(data, offset + HEADER.size)[0]
        offset += aligned(length) or len(data)


def encode(build: Callable[[IPBatch], object]) -> list[bytes]:
    """The requests `build` makes on an IPBatch, as separate messages (interface index 0)."""
    batch = IPBatch()
    try:
        build(batch)
        data = bytes(batch.batch)
    finally:
        batch.close()
    messages, offset = [], 0
    while offset < len(data):
        length = HEADER.unpack_from(data, offset)[0]
        messages.append(data[offset:offset + length])
        offset += (length + 3) & ~3
    return messages


CLSACT_INGRESS, CLSACT_EGRESS = "ffff:fff2", "ffff:fff3"  # a clsact qdisc's two hooks, as filters name them
FD_SENTINEL = 0x7EADBEEF  # where a program's fd goes in an encoded filter request

# Every port of a node shares one filter block per hook (the kernel numbers blocks per namespace).
# Each block a qdisc binds alone goes on one kernel-wide list, searched linearly at every bind
# (flow_indr_dev_setup_offload, for devices without tc offload, such as veth): binding n costs
# O(n^2), 10 ns per block already bound (docs/benchmarks.md, BFD data plane and AIPod). A shared
# block goes on it once. The lab's programs find their port by (namespace, ifindex) anyway, so
# one filter per node and hook serves all its ports, and a request names the block, not a port.
SHARED_BLOCKS = {CLSACT_INGRESS: 1, CLSACT_EGRESS: 2}
TCA_INGRESS_BLOCK, TCA_EGRESS_BLOCK = 13, 14  # the clsact qdisc's attributes naming them
BLOCK_INDEX = -1  # TCM_IFINDEX_MAGIC_BLOCK: a filter request for the block in tcm_parent, not a device's
NLA = struct.Struct("=HHI")  # a netlink attribute of one u32: length, type, value


@cache
def clsact(command: str = "add", shared: bool = True) -> list[bytes]:
    """A clsact qdisc added (or "del"eted), the hooks the lab's BPF programs attach to; `shared`:
    its hooks are the node's shared blocks (SHARED_BLOCKS), whose filters every port runs."""
    messages = encode(lambda batch: batch.tc(command, "clsact", 0))
    if command != "add" or not shared:
        return messages
    return [with_attributes(m, ((TCA_INGRESS_BLOCK, SHARED_BLOCKS[CLSACT_INGRESS]),
                                (TCA_EGRESS_BLOCK, SHARED_BLOCKS[CLSACT_EGRESS]))) for m in messages]


def with_attributes(message: bytes, attributes: tuple[tuple[int, int], ...]) -> bytes:
    """`message` with u32 attributes appended (ones pyroute2 does not know), its length updated."""
    padded = message + bytes(-len(message) % 4)
    data = bytearray(padded + b"".join(NLA.pack(NLA.size, kind, value) for kind, value in attributes))
    struct.pack_into("=I", data, 0, len(data))
    return bytes(data)


@cache
def bpf_filter(hook: str, name: str, priority: int | None = None, shared: bool = True) -> list[bytes]:
    """A direct-action BPF filter on a clsact hook, named `name` (what `tc filter show` calls it),
    its program's fd left as FD_SENTINEL for `with_program`; `shared`: on the hook's shared block
    (sent with BLOCK_INDEX for the interface: every port of the node runs it), else on the hook of
    the interface it is sent for. Without a priority the kernel gives it 49152."""
    extra = {} if priority is None else {"prio": priority}
    parent = SHARED_BLOCKS[hook] if shared else hook
    return encode(lambda batch: batch.tc("add-filter", "bpf", 0, ":1", fd=FD_SENTINEL, name=name, parent=parent,
                                         classid=1, direct_action=True, **extra))


def with_program(messages: list[bytes], fd: int) -> list[bytes]:
    """Filter requests of `bpf_filter` for the program behind `fd`."""
    return [patch(message, FD_SENTINEL, fd) for message in messages]


def patch(message: bytes, sentinel: int, value: int) -> bytes:
    """Write `value` where the 32-bit `sentinel` was encoded (an attribute such as a program's fd,
    encoded with a value that cannot occur elsewhere in the message)."""
    old, new = struct.pack("=I", sentinel), struct.pack("=I", value)
    if message.count(old) != 1:
        raise ValueError(f"sentinel {sentinel:#x} found {message.count(old)} times in the request")
    return message.replace(old, new)


class Sender:
    """Requests for the interfaces of one namespace: `add` them, then `flush` sends them and raises
    on the first refused one (naming what it was), unless its errno is among `tolerated`."""

    def __init__(self, netns_path: str, node: str):
        self.node = node
        with in_netns(netns_path):
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
        self.sock.bind((0, 0))
        self.pending: list[tuple[bytes, str, frozenset[int]]] = []
        self.sequence = 0

    def add(self, messages: list[bytes], index: int, what: str, tolerated: frozenset[int] = frozenset()) -> None:
        for message in messages:
            self.sequence += 1
            data = bytearray(message)
            INDEX.pack_into(data, INDEX_OFFSET, index)
            struct.pack_into("=I", data, 8, self.sequence)
            self.pending.append((bytes(data), what, tolerated))

    def add_node_program(self, hook: str, name: str, fd: int, what: str, priority: int | None = None) -> None:
        """The program behind `fd` on `hook` of every port of the node: a filter on the hook's
        shared block, sent once (a shared filter names the block, never a port)."""
        self.add(with_program(bpf_filter(hook, name, priority), fd), BLOCK_INDEX, what)

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        for start, end in spans([aligned(len(m)) for m, _, _ in pending], CHUNK_MESSAGES):
            chunk = pending[start:end]
            self.sock.send(b"".join(m + bytes(-len(m) % 4) for m, _, _ in chunk))
            self._acknowledged(chunk)

    def _acknowledged(self, chunk: list[tuple[bytes, str, frozenset[int]]]) -> None:
        first = HEADER.unpack_from(chunk[0][0])[3]
        waiting = set(range(first, first + len(chunk)))
        while waiting:
            for sequence, code in error_replies(self.sock.recv(1 << 16)):
                if sequence not in waiting:
                    continue
                waiting.discard(sequence)
                _, what, tolerated = chunk[sequence - first]
                if code and code not in tolerated:
                    raise RuntimeBackendError(
                        f"{self.node}: {what} refused by the kernel: {os.strerror(code)} "
                        f"({errno.errorcode.get(code, code)})")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
