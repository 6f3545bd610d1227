"""vty.py against a daemon stand-in that speaks FRR's vty protocol on a unix socket."""

import socket
import threading

import pytest

from twin.errors import RuntimeBackendError
from twin.lab.routing import vty

ANSWERS = {"enable": (0, ""), "show bfd peers json": (0, '[{"peer": "10.0.0.1", "status": "up"}]'),
           "configure terminal": (0, ""), "bad": (2, "% Unknown command: bad\n")}


def _serve(server: socket.socket, seen: list[str]) -> None:
    conn, _ = server.accept()
    with conn:
        buffer = b""
        while data := conn.recv(4096):
            buffer += data
            while b"\0" in buffer:
                command, buffer = buffer.split(b"\0", 1)
                seen.append(command.decode())
                status, text = ANSWERS.get(command.decode(), (2, "% Unknown command\n"))
                # the answer comes in pieces, as a daemon's large output does
                for piece in (text.encode()[:5], text.encode()[5:] + b"\0\0\0", bytes([status])):
                    conn.sendall(piece)


@pytest.fixture
def daemon(tmp_path):
    path = tmp_path / "bfdd.vty"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    seen: list[str] = []
    thread = threading.Thread(target=_serve, args=(server, seen), daemon=True)
    thread.start()
    yield path, seen
    server.close()


def test_commands_go_in_order_after_enable_and_the_last_answer_is_returned(daemon):
    path, seen = daemon
    assert vty.run(path, ["show bfd peers json"]) == '[{"peer": "10.0.0.1", "status": "up"}]'
    assert seen == ["enable", "show bfd peers json"]


def test_a_failed_command_is_named(daemon):
    path, seen = daemon
    with pytest.raises(RuntimeBackendError, match="'bad' failed: % Unknown command: bad"):
        vty.run(path, ["configure terminal", "bad", "show bfd peers json"], what="bfdd on spine-1")
    assert seen == ["enable", "configure terminal", "bad"]


def test_a_daemon_that_is_not_running(tmp_path):
    with pytest.raises(RuntimeBackendError, match="bgpd on leaf-1 is not running"):
        vty.run(tmp_path / "bgpd.vty", ["show bgp summary json"], what="bgpd on leaf-1")
