"""Sample a lab's counters on a fixed period into a metrics file, keeping the latest snapshot.

metrics.jsonl: a header line naming the interfaces and fields, then one line per sample with
the values in that order (compact: a rail4 sample is about 3 KB). Interface counters and
checksum errors every sample; qdisc backlog and drops every QDISCS_EVERY samples; counters
of active faults' nftables rules once a second (each read runs `nft`).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path

from twin.errors import TwinError
from twin.lab.handle import Lab
from twin.lab.pfc import published as pfc_counters
from twin.lab.ports import optics, phy
from twin.lab.ports.counters import NET_DEV_FIELDS, CounterReader, Snapshot
from twin.model.ports import Port

PFC_FIELDS = {"pfc_rx_pause": "rx_pause", "pfc_tx_pause": "tx_pause", "pfc_paused_ms": "paused_s",
              "pfc_queue_bytes": "queue", "ecn_marked": "ecn_marked", "steered_in": "steered_in"}
FIELDS = (*NET_DEV_FIELDS, "rx_crc_errors", "backlog_bytes", "qdisc_drops", *PFC_FIELDS, "oper_up")
FAULT_COUNTERS_EVERY_S = 1.0
QDISCS_EVERY = 5  # qdisc backlog every 5th sample (500 ms at 100 ms): a rail8 read drops from 50 ms to ~15


class Sampler:
    def __init__(self, lab: Lab, period_ms: int = 100,
                 output: Path | None = None):
        self.lab, self.runtime, self.state, self.fabric = lab, lab.runtime, lab.state, lab.fabric
        self.period = period_ms / 1000
        self.output = output
        self.latest: Snapshot | None = None
        self.fault_counters: dict[str, dict[str, int]] = {}  # fault id -> node -> packets dropped/edited
        self._phy = phy.CountReader(lab)
        self.optics: dict = {}  # Port -> optics.Reading, once a second (they move only when a fault does)
        self.gaps: list[float] = []
        self.read_s: list[float] = []
        self._stop, self._first_read = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait_first_read(self, timeout_s: float) -> bool:
        """True once every node's counters were read (and so its sockets opened) once."""
        return self._first_read.wait(timeout_s)

    def stop(self) -> dict:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        return self.stats()

    def stats(self) -> dict:
        gaps = self.gaps[1:] or [0.0]
        return {"samples": len(self.gaps), "period_ms": self.period * 1000,
                "achieved_mean_ms": round(statistics.mean(gaps) * 1000, 1),
                "achieved_max_ms": round(max(gaps) * 1000, 1),
                "read_mean_ms": round(statistics.mean(self.read_s or [0.0]) * 1000, 1)}

    def _run(self) -> None:
        out = open(self.output, "a", buffering=1) if self.output else None
        keys: list[tuple[str, str]] = []
        last_t, last_faults = None, 0.0
        try:
            with CounterReader(self.lab) as reader:
                next_at = time.monotonic()
                while not self._stop.is_set():
                    started = time.monotonic()
                    with_qdiscs = len(self.read_s) % QDISCS_EVERY == 0
                    snap = reader.read(qdiscs=with_qdiscs)
                    if not with_qdiscs and self.latest is not None:
                        _carry_qdisc_stats(self.latest, snap)
                    _add_pfc(snap, pfc_counters.ports(pfc_counters.read(self.state.directory)))
                    self.read_s.append(time.monotonic() - started)
                    if started - last_faults >= FAULT_COUNTERS_EVERY_S:
                        self.fault_counters = self._read_fault_counters()
                        self.optics = self._read_optics()
                        last_faults = started
                    self.latest = snap
                    self._first_read.set()
                    if last_t is not None:
                        self.gaps.append(snap.t - last_t)
                    last_t = snap.t
                    if out:
                        if not keys:
                            keys = sorted(snap.interfaces)
                            out.write(json.dumps({"type": "header", "interfaces": [f"{n}:{i}" for n, i in keys],
                                                  "fields": FIELDS}) + "\n")
                        out.write(json.dumps({
                            "t_mono": round(snap.t, 4),
                            "v": [[snap.interfaces.get(k, {}).get(f, 0) for f in FIELDS] for k in keys],
                            "checksum_errors": {f"{h}:{c}": v for (h, c), v in snap.checksum_errors.items() if v},
                            "faults": self.fault_counters}) + "\n")
                    next_at += self.period
                    self._stop.wait(max(0.0, next_at - time.monotonic()))
                    if time.monotonic() - next_at > self.period:  # fell behind: do not burst
                        next_at = time.monotonic()
        finally:
            self._phy.close()
            if out:
                out.close()

    def _read_optics(self) -> dict:
        try:
            return optics.readings(self.lab)
        except TwinError:  # a lab brought up without the physical layer
            return {}

    def _read_fault_counters(self) -> dict[str, dict[str, int]]:
        """Per active fault and node, the packets it dropped or damaged: the counter the ports'
        physical layer keeps at the fault's ports (a silent drop's, a bit error's)."""
        found: dict[str, dict[str, int]] = {}
        faults = [f for f in self.lab.visible_faults() or []  # none in training: they would name the place
                  if f.get("record", {}).get("ports") and f["record"].get("counter")]
        counts = self._phy.read() if faults else {}
        for fault in faults:
            per_node = found.setdefault(fault["id"], {})
            for entry in fault["record"]["ports"]:
                value = counts.get(Port(entry["node"], entry["ifname"]), {}).get(fault["record"]["counter"], 0)
                per_node[entry["node"]] = per_node.get(entry["node"], 0) + value
        return found


def _add_pfc(snap: Snapshot, ports: dict) -> None:
    """The PFC and ECN counters of every port (a file the lab's controller rewrites; none on a lab
    without queue programs)."""
    for key, counter in ports.items():
        entry = snap.interfaces.get(key)
        if entry is not None:
            for field, name in PFC_FIELDS.items():
                value = getattr(counter, name)
                entry[field] = int(value * 1000) if field == "pfc_paused_ms" else int(value)


def _carry_qdisc_stats(previous: Snapshot, current: Snapshot) -> None:
    """Samples without a qdisc dump repeat the last backlog and drop figures."""
    for key, values in current.interfaces.items():
        before = previous.interfaces.get(key, {})
        for name in ("backlog_bytes", "qdisc_drops"):
            if name in before:
                values[name] = before[name]
