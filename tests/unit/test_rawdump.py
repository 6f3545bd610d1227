"""The raw rtnetlink dump walk the route, qdisc and link readers share (lab/kernel/rawdump.py)."""

import errno

import pytest

from twin.lab.kernel import rawdump


class FakeSocket:
    """Answers a request with the given receives, in turn."""

    def __init__(self, *receives: bytes):
        self.receives, self.sent = list(receives), []

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        return len(data)

    def recv_into(self, buffer: bytearray) -> int:
        received = self.receives.pop(0)
        buffer[:len(received)] = received
        return len(received)


def message(kind: int, body: bytes) -> bytes:
    length = rawdump.HEADER.size + len(body)
    return rawdump.HEADER.pack(length, kind, 0, 1, 0) + body + b"\0" * (rawdump.align(length) - length)


def attribute(kind: int, value: bytes) -> bytes:
    length = rawdump.ATTRIBUTE.size + len(value)
    return rawdump.ATTRIBUTE.pack(length, kind) + value + b"\0" * (rawdump.align(length) - length)


def test_a_dump_yields_every_message_over_several_receives_until_done():
    first = message(16, b"a" * 5) + message(16, b"b" * 8)
    sock = FakeSocket(first, message(16, b"c" * 4) + message(rawdump.NLMSG_DONE, b"\0" * 4))
    request = rawdump.request(18, b"\0" * 16)
    seen = [(kind, data[start:end]) for kind, data, start, end in rawdump.dump(sock, request)]
    assert seen == [(16, b"a" * 5), (16, b"b" * 8), (16, b"c" * 4)]
    assert sock.sent == [request] and rawdump.HEADER.unpack_from(request)[:3] == (32, 18, 0x301)


def test_an_error_reply_raises_its_errno_and_a_short_message_does_not_loop():
    refused = message(rawdump.NLMSG_ERROR, rawdump.ERROR_CODE.pack(-errno.EOPNOTSUPP) + b"\0" * 16)
    with pytest.raises(OSError) as raised:
        list(rawdump.dump(FakeSocket(refused), b""))
    assert raised.value.errno == errno.EOPNOTSUPP
    broken = rawdump.HEADER.pack(8, 16, 0, 1, 0) + b"\0" * 8  # a length shorter than the header
    with pytest.raises(OSError, match="shorter than its header"):
        list(rawdump.dump(FakeSocket(broken), b""))


def test_attributes_are_walked_aligned_with_their_flags_masked():
    nested_flag = 0x8000
    body = attribute(3, b"eth1\0") + attribute(23 | nested_flag, b"\1" * 8) + attribute(1, b"")
    walked = [(kind, body[start:end]) for kind, start, end in rawdump.attributes(body, 0, len(body))]
    assert walked == [(3, b"eth1\0"), (23, b"\1" * 8), (1, b"")]
    assert list(rawdump.attributes(rawdump.ATTRIBUTE.pack(2, 3) + b"\0\0", 0, 6)) == []  # a length below 4 ends it
