"""The NIC's sends while its QPs' path discoveries are answered (roce/nic.py send_through_answers):
each ICMP answer a socket queues (IP_RECVERR) fails its next send once, sending nothing. Shown on
loopback with a closed port's answers, which the kernel queues the same way as a switch's
time-exceeded."""

import socket

import pytest

from twin.roce.nic import send_through_answers
from twin.roce.paths import MAX_TTL
from twin.sockopts import report_errors


def drain(sock: socket.socket) -> None:
    while True:
        try:
            sock.recvmsg(512, 512, socket.MSG_ERRQUEUE)
        except OSError:
            return


@pytest.fixture
def answered():
    """A socket connected to a closed port, errors reported: every datagram it sends is answered."""
    closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    report_errors(sock)
    sock.connect(("127.0.0.1", port))
    yield sock
    sock.close()


def test_a_send_goes_out_though_answers_keep_arriving(answered):
    """Another answer arrives after each read of the queue (a discovery's eight come over a few
    ms, and a busy machine can stop the NIC's thread between its read and its retry): the send
    still goes out, where one retry lost it (and go-back-N took it for a loss)."""
    more = MAX_TTL - 1

    def read_answers():
        nonlocal more
        drain(answered)
        if more:
            more -= 1
            answered.send(b"probe")  # answered at once on loopback: fails the next send
    answered.send(b"probe")
    with pytest.raises(OSError):
        answered.send(b"data")  # what an answer does to the next send
    answered.send(b"probe")
    send_through_answers(answered, b"data", [], read_answers)
    assert more == 0


def test_a_lasting_error_is_the_callers(answered):
    def read_answers():
        drain(answered)
        answered.send(b"probe")
    answered.send(b"probe")
    with pytest.raises(OSError):
        send_through_answers(answered, b"data", [], read_answers)
