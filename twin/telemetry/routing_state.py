"""Every switch's routing state for the telemetry servers (gNMI, Prometheus): BGP sessions, BFD
peers and the ECMP width of its host routes, as `twin lab status` reads them (lab/status.py).

From the first time a server asks: every switch every FULL_EVERY_S, and a switch at once when
its FRR log says a BGP session or BFD peer changed, or its kernel's host routes did (the run's
RoutingMonitor, routes.py, watches both), and every UNSETTLED_EVERY_S while one of its sessions
is not Established. A full read is three requests to every switch's daemons, too many to repeat
each second on a big lab for a change that a log line announces anyway.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from twin.lab.handle import Lab
from twin.lab.status import SwitchStatus, switch_status
from twin.model.ecmp import expected_next_hops
from twin.telemetry.routes import RoutingMonitor

FULL_EVERY_S = 2.0
# A switch with a BGP session not Established (or that did not answer) is read this often until it
# settles: the states between Down and Up (Idle, Connect, Active, OpenSent) are in no log line FRR
# writes at its default level, and at FULL_EVERY_S a gNMI subscriber saw Active 1.9 s after bgpd
# did. (Logging every state machine step, `debug bgp neighbor-events`, also logs every keepalive
# timer: a line a second per session, 8,192 a second at pod128, into the lab's tmpfs.)
UNSETTLED_EVERY_S = 0.5
READERS = 8  # switches read at once


class _Changes:
    """What RoutingMonitor reports (its `events`), turned into switches to read again."""

    def __init__(self, wake: threading.Event):
        self.nodes: set[str] = set()
        self._lock, self._wake = threading.Lock(), wake

    def emit(self, kind: str, node: str, **_fields) -> None:
        with self._lock:
            self.nodes.add(node)
        self._wake.set()

    def take(self) -> set[str]:
        with self._lock:
            taken, self.nodes = self.nodes, set()
        return taken


class RoutingState:
    def __init__(self, lab: Lab, full_every_s: float = FULL_EVERY_S):
        self.lab, self.full_every_s = lab, full_every_s
        self.latest: dict[str, SwitchStatus] = {}
        self._wanted, self._read, self._stop, self._wake = (threading.Event() for _ in range(4))
        self._changes = _Changes(self._wake)
        self._expected = expected_next_hops(lab.fabric)
        self._switches = [node.name for node in lab.fabric.switches]
        self._thread = threading.Thread(target=self._run, name="routing-state", daemon=True)
        self._thread.start()

    def want(self, wait_s: float) -> dict[str, SwitchStatus]:
        """Read from now on; wait up to `wait_s` for the first read. Returns the latest."""
        self._wanted.set()
        self._read.wait(wait_s)
        return self.latest

    def stop(self) -> None:
        self._stop.set()
        self._wanted.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        self._wanted.wait()
        if self._stop.is_set():
            return
        monitor = RoutingMonitor(self.lab, self._changes)
        monitor.start()
        try:
            with ThreadPoolExecutor(max_workers=READERS) as pool:
                while not self._stop.is_set():
                    self._refresh(pool, self._switches)
                    self._read.set()
                    full_at = time.monotonic() + self.full_every_s
                    while not self._stop.is_set() and (left := full_at - time.monotonic()) > 0:
                        unsettled = self._unsettled()
                        if self._wake.wait(min(left, UNSETTLED_EVERY_S) if unsettled else left):
                            self._wake.clear()
                            self._refresh(pool, sorted(self._changes.take()))
                        elif unsettled:
                            self._refresh(pool, unsettled)
        finally:
            monitor.stop()

    def _unsettled(self) -> list[str]:
        return sorted(name for name, status in self.latest.items()
                      if status.error or any(state != "Established" for state in status.bgp.values()))

    def _refresh(self, pool: ThreadPoolExecutor, switches: list[str]) -> None:
        read = pool.map(lambda name: switch_status(self.lab, name, self._expected), switches)
        self.latest = self.latest | {status.name: status for status in read}
