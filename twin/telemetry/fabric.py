"""What the fabric's queues did during a run: packets dropped by any queue (every port's qdisc, switch
and host), the PFC pauses of every link direction on a lossless lab, and the packets each switch
queue marked ECN Congestion Experienced where the lab marks, and the packets adaptive routing moved
onto each uplink where the lab balances so (`steered`).

A watcher thread in the runner reads them and emits `fabric` events holding running totals since
the run began, so the report can take any window's figures from two of them:

    {"kind": "fabric", "t": 12.3, "queue_drops": 0, "drops": {"leaf-g1-r1 hs-g1h1": 3},
     "pause_s": {"spine-1 -> leaf-g1-r1": 0.42}, "pauses": {...}, "marks": {...}, "paused": [...], ...}

`drops`, `pause_s`, `pauses` and `marks` list only directions whose total changed since the previous event
(replaying the events rebuilds the totals at any time). PFC counters come from the controller's
file every 250 ms (a file read); qdisc drops from netlink every second (less often where a dump
of every port takes more than 5 % of a core) and at once when asked (a fault applied or cleared).
"""

from __future__ import annotations

import threading
import time

from twin.events import EventLog
from twin.lab.handle import Lab
from twin.lab.kernel.offload import snmp
from twin.lab.pfc import published as pfc_counters
from twin.lab.ports.counters import CounterReader
from twin.model.ports import Port, direction

PFC_EVERY_S = 0.25
PFC_COLUMNS = ("paused_s", "rx_pause", "paused", "ecn_marked", "steered_in")
DROPS_EVERY_S = 1.0
DROPS_BUDGET = 0.05  # share of a core the periodic drop counts may take
HOST_SOCKET_COUNTERS = ("Udp.RcvbufErrors", "Udp.SndbufErrors")


def softnet_drops() -> int:
    """Packets the kernel's per-CPU input backlog dropped, machine-wide (/proc/net/softnet_stat):
    a veth hands every packet to it, so a twin that overruns it loses packets no queue counted."""
    with open("/proc/net/softnet_stat") as handle:
        return sum(int(line.split()[1], 16) for line in handle if line.strip())


class FabricWatch:
    def __init__(self, lab: Lab, events: EventLog):
        self.lab, self.state, self.fabric, self.events = lab, lab.state, lab.fabric, events
        fabric = lab.fabric
        self.directions = {Port(end.node, end.ifname): direction(fabric, Port(end.node, end.ifname))
                           for link in fabric.links for end in (link.a, link.b)}
        self._reader = CounterReader(lab)
        self._base_drops: dict[Port, int] = {}
        self._base_pfc: dict[tuple[str, str], tuple] = {}  # PFC_COLUMNS at the start
        self._base_host = self._base_softnet = 0
        self._last: dict[str, dict] = {"drops": {}, "pause_s": {}, "pauses": {}, "marks": {}, "steered": {}}
        self._last_paused: list[str] = []
        self._drops: dict[Port, int] = {}
        self._host_drops = self._softnet = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="fabric-watch", daemon=True)

    def start(self) -> None:
        self._base_drops = self._read_drops()
        self._base_pfc = pfc_counters.columns(pfc_counters.read(self.state.directory), *PFC_COLUMNS)
        self._base_host, self._base_softnet = self._read_host_drops(), softnet_drops()
        self._thread.start()

    def mark(self) -> None:
        """Count the drops now (a fault was applied or cleared): its window starts or ends here."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._emit(drops=True, always=True, final=True)
        self._reader.close()

    def _run(self) -> None:
        next_drops = time.monotonic() + DROPS_EVERY_S
        while not self._stop.is_set():
            marked = self._wake.wait(PFC_EVERY_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            now = time.monotonic()
            drops = marked or now >= next_drops
            self._emit(drops=drops, always=marked)
            if drops:
                # At most DROPS_BUDGET of a core between fault marks: a dump of every port took
                # 0.2 s at pod128 (4,608 ports), a fifth of a core every second.
                took = time.monotonic() - now
                next_drops = now + max(DROPS_EVERY_S, took / DROPS_BUDGET)

    def _read_drops(self) -> dict[Port, int]:
        snap = self._reader.read(checksums=False, qdiscs=True)
        return {Port(*key): values.get("qdisc_drops", 0) for key, values in snap.interfaces.items()}

    def _read_host_drops(self) -> int:
        total = 0
        for host in self.fabric.hosts:
            values = snmp(self.lab.netns(host.name))
            total += sum(values.get(name, 0) for name in HOST_SOCKET_COUNTERS)
        return total

    def _emit(self, drops: bool, always: bool = False, final: bool = False) -> None:
        with self._lock:
            if drops:
                now_drops = self._read_drops()
                self._drops = {p: n - self._base_drops.get(p, 0) for p, n in now_drops.items()
                               if n - self._base_drops.get(p, 0) > 0}
                self._host_drops = self._read_host_drops() - self._base_host
                self._softnet = softnet_drops() - self._base_softnet
            document = pfc_counters.read(self.state.directory)
            totals = {"drops": {str(p): n for p, n in self._drops.items()}, "pause_s": {}, "pauses": {}, "marks": {},
                      "steered": {}}
            paused = []
            for port, (paused_s, rx_pause, held, marked, moved_in) in \
                    pfc_counters.columns(document, *PFC_COLUMNS).items():
                base_s, base_pauses, _held, base_marked, base_moved = self._base_pfc.get(port, (0.0, 0, False, 0, 0))
                name = self.directions.get(port)
                if name is None:
                    continue
                if paused_s - base_s > 0:
                    totals["pause_s"][name] = round(paused_s - base_s, 4)
                    totals["pauses"][name] = rx_pause - base_pauses
                if marked - base_marked > 0:
                    totals["marks"][name] = marked - base_marked
                if moved_in - base_moved > 0:
                    totals["steered"][name] = moved_in - base_moved
                if held:
                    paused.append(name)
            changed = {key: {k: v for k, v in totals[key].items() if self._last[key].get(k) != v}
                       for key in totals}
            if not always and not any(changed.values()) and paused == self._last_paused:
                return
            self._last, self._last_paused = totals, sorted(paused)
            extra = {"controller": document["controller"]} if final and document else {}
            self.events.emit("fabric", queue_drops=sum(self._drops.values()), host_socket_drops=self._host_drops,
                             kernel_backlog_drops=self._softnet, paused=sorted(paused), **changed, **extra)


def replay(records: list[dict]) -> list[tuple[float, dict]]:
    """The `fabric` events as (t, totals) with every direction's running totals filled in."""
    state = {"drops": {}, "pause_s": {}, "pauses": {}, "marks": {}, "steered": {}}  # absent in older runs
    out = []
    for record in records:
        if record["kind"] != "fabric":
            continue
        for key in state:
            state[key].update(record.get(key, {}))
        out.append((record["t"], {"queue_drops": record["queue_drops"],
                                  "host_socket_drops": record["host_socket_drops"],
                                  "kernel_backlog_drops": record["kernel_backlog_drops"],
                                  "paused": record["paused"], **{k: dict(v) for k, v in state.items()}}))
    return out
