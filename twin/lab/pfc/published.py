"""PFC counters of every port, as the controller publishes them (`<lab dir>/pfc/counters.json`,
rewritten atomically at most every 100 ms) and as readers (telemetry, status, the dashboard, the
report) use them.

Per port (one direction of a link, the egress of `node` through `ifname`), like a switch's
per-port PFC counters:
    rx_pause    pauses this port received (XOFF from its peer, or a fault's pause frames)
    tx_pause    XOFF this interface sent: its node paused the peer's egress toward it
    paused_s    seconds this port's egress was held, the ongoing pause included
    paused      held right now, paused_for_s for how long (0 when not held)
    queue       bytes in its egress queue now (switch ports), queue_peak the most it held
    xoff        its queue is pausing the ports that feed it: from crossing XOFF until the controller
                has released them after XON (`pausing`); xoff_times how often it went above XOFF
    watchdog    times the PFC watchdog turned its pause into drops
    ecn_marked  packets its queue marked Congestion Experienced (ECN)
    steered_in  adaptive routing: packets the kernel routed to another uplink, moved to this one;
                steered_away the packets it routed here, moved to another
    late        lossless: packets that entered its queue above the modelled buffer, held while the
                emulator's pause was late (a real switch's would have held them off; buffers.py)
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path

from twin.errors import TwinError
from twin.lab import publisher

FILE = "counters.json"
_LATEST: dict[Path, tuple[bytes, dict]] = {}  # file -> (its bytes, its document)
_PORTS: tuple[dict, dict] | None = None  # the document ports() built last, and its counters
_LATEST_LOCK = threading.Lock()


@dataclass
class PortCounters:
    rx_pause: int = 0
    tx_pause: int = 0
    paused_s: float = 0.0
    paused: bool = False
    paused_for_s: float = 0.0
    queue: int = 0
    queue_peak: int = 0
    xoff: bool = False
    xoff_times: int = 0
    watchdog: int = 0
    ecn_marked: int = 0
    steered_in: int = 0
    steered_away: int = 0
    late: int = 0


def pausing(phase: int, feeders_held: bool) -> bool:
    """Whether a queue is pausing its feeders, given its XOFF phase (odd from crossing XOFF until
    falling below XON; the programs move it in the kernel) and whether the controller still holds
    ports for it. The programs move the phase before the controller acts on the XON event: a
    publication in between showed a port held by a switch none of whose queues was above XOFF,
    which is what a pause with no cause looks like (detect/pauses.py named such links pfc_pause,
    0.7 s after a storm's clear, while the spread unwound). So a queue counts as pausing until
    its feeders are released, as a real switch's queue pauses its senders until its XON is sent."""
    return bool(phase & 1) or feeders_held


def directory(lab_dir: Path) -> Path:
    return lab_dir / "pfc"


FIELDS = [f.name for f in fields(PortCounters)]


def encode(now: float, rows: dict, controller: dict) -> bytes:
    """rows: port -> (its counters, paused_s to show: the ongoing pause included). One list of
    values per port (in FIELDS' order) keeps the file small and quick to write every 100 ms."""
    ports = {f"{port[0]} {port[1]}": [getattr(c, name) if name != "paused_s" else paused_s for name in FIELDS]
             for port, (c, paused_s) in rows.items()}
    return json.dumps({"t_mono": round(now, 4), "t_wall": round(time.time(), 3), "fields": FIELDS,
                       "ports": ports, "controller": controller}).encode()


def store(lab_dir: Path, data: bytes) -> None:
    """Replace the published file with `data` (readers see the old file or the new, never half)."""
    publisher.store(path(lab_dir), data)


def path(lab_dir: Path) -> Path:
    return directory(lab_dir) / FILE


def read(lab_dir: Path) -> dict | None:
    """The latest counters, or None on a lossy lab (no controller) or before the first write.
    The document is shared by every reader in the process until the controller writes the next
    (the sampler, the fabric watch and the probe detectors each read it several times a second
    inside the runner, where parsing it again was a tenth of the interpreter lock's time):
    readers must not change it."""
    path = directory(lab_dir) / FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    with _LATEST_LOCK:
        latest = _LATEST.get(path)
    if latest is not None and latest[0] == data:  # the same bytes: comparing them costs microseconds
        return latest[1]
    try:
        document = json.loads(data)
    except json.JSONDecodeError as exc:  # written by replace, so only a foreign file
        raise TwinError(f"cannot read the PFC counters: {exc}") from None
    with _LATEST_LOCK:
        _LATEST[path] = (data, document)
    return document


def columns(document: dict | None, *names: str) -> dict[tuple[str, str], tuple]:
    """(node, ifname) -> the values of these counters, read from the rows as written: building
    every port's counters took 16 ms for pod128's 4,608 ports, at every read."""
    if not document:
        return {}
    at = [document["fields"].index(name) for name in names]
    return {tuple(key.split(" ", 1)): tuple(values[i] for i in at) for key, values in document["ports"].items()}


def paused_for(document: dict | None) -> dict[tuple[str, str], float]:
    """(node, ifname) -> how long it has been held, for the ports held now."""
    if not document:
        return {}
    at = document["fields"].index("paused_for_s")
    return {tuple(key.split(" ", 1)): values[at] for key, values in document["ports"].items() if values[at]}


def ports(document: dict | None) -> dict[tuple[str, str], PortCounters]:
    """(node, ifname) -> counters; the same objects for the same document (read() shares it):
    readers must not change them."""
    global _PORTS
    if not document:
        return {}
    with _LATEST_LOCK:
        built = _PORTS
    if built and built[0] is document:
        return built[1]
    names = document["fields"]
    known = set(FIELDS)  # a file written before a counter existed lacks it: the default stands
    counters = {tuple(key.split(" ", 1)): PortCounters(**{n: v for n, v in zip(names, values) if n in known})
                for key, values in document["ports"].items()}
    with _LATEST_LOCK:
        _PORTS = (document, counters)  # only the newest document's: the runner reads one lab
    return counters
