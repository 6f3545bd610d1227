"""Commands to one FRR daemon over its vty socket, the way vtysh sends them.

vtysh starts by building FRR's whole command tree (26 ms of CPU a call here), and bring-up asks
every switch of pod128 several times over. The daemon's own socket takes the same commands and
gives the same text and JSON: each command goes NUL-terminated, and the answer ends with three
NULs and the command's status (lib/command.h: 0 is CMD_SUCCESS).
"""

from __future__ import annotations

import socket
from pathlib import Path

from twin.errors import RuntimeBackendError

END = b"\0\0\0"
CMD_SUCCESS = 0


def run(path: Path, commands: list[str], timeout_s: float = 10.0, what: str = "") -> str:
    """Send `commands` in order on one session (starting in enable mode, as vtysh does) and return
    the last one's output; raises naming the first command that failed."""
    what = what or path.stem
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            output = ""
            for command in ["enable", *commands]:
                sock.sendall(command.encode() + b"\0")
                status, output = _answer(sock)
                if status != CMD_SUCCESS:
                    raise RuntimeBackendError(f"{what}: {command!r} failed: {output.strip() or f'status {status}'}")
            return output
    except FileNotFoundError:
        raise RuntimeBackendError(f"{what} is not running (no {path})") from None
    except (TimeoutError, ConnectionError) as exc:
        raise RuntimeBackendError(f"{what} does not answer on {path} ({exc.__class__.__name__})") from None


def _answer(sock: socket.socket) -> tuple[int, str]:
    data = bytearray()
    while len(data) < 4 or data[-4:-1] != END:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionResetError("the daemon closed the session")
        data += chunk
    return data[-1], data[:-4].decode(errors="replace")
