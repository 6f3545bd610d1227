"""Talking to a lab's PFC controller: start it at `up`, ask it to hold or release ports (faults),
read what it published. One JSON request per datagram on `<lab dir>/pfc/control.sock`."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from twin.errors import TwinError
from twin.lab.handle import Lab, python_module
from twin.lab.pfc import published
from twin.lab.pfc.controller import SOCKET
from twin.lab.state import LabState
from twin.model.ports import Port
from twin.procs import alive

RESOURCE = "pfc/controller"
START_TIMEOUT_S = 30.0
START_S_PER_PORT = 0.01  # programs, gates and sockets per port: pod128 (4,608 ports) took 16 s


def request(lab_dir: Path, message: dict, timeout_s: float = 5.0) -> dict:
    path = published.directory(lab_dir) / SOCKET
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(str(path))
            sock.send(json.dumps(message).encode())
            reply = json.loads(sock.recv(1 << 20))
        except (TimeoutError, FileNotFoundError, ConnectionError) as exc:
            raise TwinError(f"the lab's PFC controller does not answer ({exc.__class__.__name__})",
                            hint=f"see {published.directory(lab_dir) / 'controller.log'}; "
                                 "`twin lab status` shows whether it runs") from None
    if not reply.get("ok"):
        raise TwinError(f"PFC controller: {reply.get('error')}")
    return reply


def port_counters_now(lab_dir: Path, timeout_s: float = 5.0) -> dict[tuple[str, str], published.PortCounters]:
    """Every port's counters as of this call: the controller publishes at once on request and its
    publisher stores the file soon after. A reader that waits for the next periodic publication
    cannot tell one still coming from none (nothing moved, nothing is published): two equal reads
    0.3 s apart looked settled with moved packets unpublished (CI: 2, then 4, of a marked test's
    packets in the unmarked one), a fixed sleep the same."""
    at = request(lab_dir, {"op": "publish"}, timeout_s)["t_mono"]
    deadline = time.monotonic() + timeout_s
    while (document := published.read(lab_dir)) is None or document["t_mono"] < at:
        if time.monotonic() > deadline:
            raise TwinError("the PFC controller published its counters but they were not stored in time",
                            hint=f"is {published.directory(lab_dir)} writable? see its controller.log")
        time.sleep(0.01)
    return published.ports(document)


def hold(lab_dir: Path, fault_id: str, ports: list[Port], pause_ms: float | None = None,
         period_ms: float | None = None) -> None:
    """Pause `ports` for fault `fault_id`: for good, or pause_ms every period_ms."""
    request(lab_dir, {"op": "hold", "id": fault_id, "ports": [[p.node, p.ifname] for p in ports],
                      "pause_ms": pause_ms, "period_ms": period_ms})


def tune(lab_dir: Path, fault_id: str, port: Port, **settings) -> None:
    """Change a queue's xoff/xon or kmin/kmax (bytes) and pmax, or a port's watchdog_ms, for the
    fault's lifetime (`release` undoes it)."""
    request(lab_dir, {"op": "tune", "id": fault_id, "port": [port.node, port.ifname], **settings})


def release(lab_dir: Path, fault_id: str) -> dict:
    """Undo everything fault `fault_id` asked for; returns its pause report."""
    return request(lab_dir, {"op": "release", "id": fault_id})["report"]


def marking(lab_dir: Path) -> dict[tuple[str, str], tuple[int, int, float]]:
    """(node, ifname) -> the queue's ECN marking now: kmin, kmax (bytes), pmax."""
    ports = request(lab_dir, {"op": "marking"})["ports"]
    return {tuple(key.split(" ", 1)): (kmin, kmax, pmax) for key, (kmin, kmax, pmax) in ports.items()}


def thresholds(lab_dir: Path) -> dict[tuple[str, str], tuple[int, int]]:
    """(node, ifname) -> the queue's XOFF and XON now (bytes; XOFF 0: it never pauses its senders)."""
    ports = request(lab_dir, {"op": "thresholds"})["ports"]
    return {tuple(key.split(" ", 1)): (xoff, xon) for key, (xoff, xon) in ports.items()}


def start(lab: Lab) -> int:
    """Start the controller (a host process the lab owns) and wait until its programs are
    attached and it answers."""
    directory = published.directory(lab.paths.root)
    log = directory / "controller.log"
    proc = lab.spawn_owned(RESOURCE, python_module("twin.lab.pfc.controller", str(lab.paths.root)), log,
                           kind="controller").proc
    timeout_s = START_TIMEOUT_S + START_S_PER_PORT * 2 * len(lab.fabric.links)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (directory / SOCKET).exists():
            try:
                request(lab.paths.root, {"op": "ping"}, timeout_s=1.0)
                return proc.pid
            except TwinError:
                pass
        if proc.poll() is not None:
            raise TwinError("the PFC controller exited while starting",
                            hint=log.read_text()[-900:] or f"see {log}")
        time.sleep(0.05)
    raise TwinError(f"the PFC controller did not answer within {timeout_s:.0f} s", hint=f"see {log}")


def running(state: LabState) -> bool:
    return any(r.name == RESOURCE and r.pid and alive(r.pid) for r in state.resources)
