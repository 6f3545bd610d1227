"""The PFC gates' netlink messages as the controller sends them (lab/pfc/gate.py)."""

import errno
import socket

import pytest

from twin.lab.kernel import nlbatch
from twin.lab.pfc import gate

NO_SUCH_INDEX = 0x7FFFFFF0  # no interface has it: every request fails, nothing changes


def _gate_messages(count: int) -> list[bytes]:
    options = (gate.CLOSED_RATE, 9100, 600_000)
    return [gate._message(NO_SUCH_INDEX - n, options, 1) for n in range(count)]


def _errors(sock: socket.socket) -> list[int]:
    codes = []
    while True:
        try:
            codes += [code for _sequence, code in nlbatch.error_replies(sock.recv(1 << 20))]
        except BlockingIOError:
            return codes


def test_a_superspines_gates_go_to_the_kernel_in_sends_its_socket_takes():
    """AIPod's superspines have 256 ports: their gates' messages in one send were larger than a
    netlink socket takes (EMSGSIZE, the controller died at start). Split into sends of at most
    CHUNK_BYTES, every message reaches the kernel, in order (each is refused here: no such port)."""
    messages = _gate_messages(256)
    sends = list(gate._sends(messages))
    assert b"".join(sends) == b"".join(messages)
    assert all(len(each) <= nlbatch.CHUNK_BYTES for each in sends) and len(sends) > 1
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind((0, 0))
        sock.setblocking(False)
        with pytest.raises(OSError) as whole:
            sock.send(b"".join(messages))
        assert whole.value.errno == errno.EMSGSIZE
        for each in sends:
            sock.send(each)
        assert _errors(sock) == [errno.ENODEV] * len(messages)


def test_a_message_larger_than_a_send_goes_alone():
    big, small = b"x" * (nlbatch.CHUNK_BYTES + 1), b"y" * 8
    assert list(gate._sends([small, big, small, small])) == [small, big, small * 2]
    assert list(gate._sends([])) == []
