"""What the dashboard shows, gathered from the running lab by background threads.

- utilisation: interface byte counters (once a second), per link the busier direction
- loss: the probe meshes running on the lab (the training loop's, a scenario's, `twin probe`),
  followed from their agents' files; a link's loss is the lowest loss of any probed path
  through it over the last few seconds (a link is as good as its best path: if every path
  over it loses, it does)
- sessions: BGP and BFD state per switch (vtysh JSON, every 2 s)
- step times: the collective jobs' rank logs; probe loss over time
- PFC: the controller's per-port counters (a link is `paused` when either direction was held
  for more than PAUSED_SHARE of the last second), how many directions were held on average,
  and the packets every port's queue dropped (qdisc counters)
- faults: the lab state's active faults, never during a training session
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque

from twin.errors import TwinError
from twin.events import JsonlTail
from twin.lab.handle import Lab
from twin.lab.pfc import published as pfc_counters
from twin.lab.ports.counters import CounterReader
from twin.lab.status import lab_status
from twin.model.ports import Port
from twin.model.targets import Target
from twin.probes.mesh import Interval, ProbeMesh, address_links

LOSS_WINDOW_S = 5.0
CHART_S = 180.0
MIN_PROBES = 5  # a path needs this many probes in the window to speak for its links
PAUSED_SHARE = 0.05


class Collector:
    def __init__(self, lab: Lab):
        self.lab, self.state, self.fabric = lab, lab.state, lab.fabric
        fabric = lab.fabric
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.util: dict[str, float] = {}
        self.loss: dict[str, float] = {}
        self.sessions: list[dict] = []
        self.steps: deque = deque()
        self.probe_loss: deque = deque()
        self.faults: list[dict] | None = None
        self.training = False
        self.paused: dict[str, float] = {}  # link -> share of the last second its busier direction was held
        self.marks: dict[str, float] = {}  # link -> ECN marks a second
        self.paused_series: deque = deque()  # (t, directions held on average)
        self.resent: deque = deque()  # (t, MB a RoCE job's rank 0 resent in that step)
        self.queue_drops = 0
        self._last_pfc: tuple[float, dict] | None = None
        self._drop_base: dict | None = None
        self._link_of = {Port(end.node, end.ifname): link.name for link in fabric.links for end in (link.a, link.b)}
        self._reader: CounterReader | None = None
        self._last_snap = None
        self._intervals: deque = deque()
        self._meshes: dict[str, ProbeMesh] = {}
        self._rank_logs: dict[str, JsonlTail] = {}
        self._bfd_link = address_links(fabric)
        # fault targets name links either way
        self._link_names = {Target.parse(link.name).key: link.name for link in fabric.links}
        self._threads = [threading.Thread(target=self._loop, args=(period, step), daemon=True)
                         for period, step in ((1.0, self._counters), (2.0, self._sessions),
                                              (1.0, self._follow_files), (1.0, self._faults), (1.0, self._pfc))]
        self._queue_reader: CounterReader | None = None

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        for mesh in self._meshes.values():
            mesh.unfollow()
        for reader in (self._reader, self._queue_reader):
            if reader:
                reader.close()

    def _loop(self, period: float, step) -> None:
        while not self._stop.is_set():
            try:
                step()
            except (OSError, TwinError, KeyError, ValueError):
                pass  # a lab changing under us (a switch down, a mesh ending): next round
            self._stop.wait(period)

    # --- sources ---------------------------------------------------------------------------
    def _counters(self) -> None:
        self._reader = self._reader or CounterReader(self.lab)
        snap = self._reader.read(checksums=False, qdiscs=False)
        last, self._last_snap = self._last_snap, snap
        if last is None:
            return
        dt = snap.t - last.t
        util = {}
        for link in self.fabric.links:
            rates = []
            for end in (link.a, link.b):
                now, before = snap.interfaces.get((end.node, end.ifname)), last.interfaces.get((end.node, end.ifname))
                if now and before:
                    rates.append((now["tx_bytes"] - before["tx_bytes"]) * 8 / dt / self.fabric.rate_bps)
            util[link.name] = round(max(rates, default=0.0), 3)
        with self._lock:
            self.util = util

    def _pfc(self) -> None:
        now = time.monotonic()
        ports = pfc_counters.ports(pfc_counters.read(self.state.directory))
        self._queue_reader = self._queue_reader or CounterReader(self.lab)
        drops = {k: v.get("qdisc_drops", 0) for k, v in
                 self._queue_reader.read(checksums=False, qdiscs=True).interfaces.items()}
        self._drop_base = self._drop_base if self._drop_base is not None else drops
        last, self._last_pfc = self._last_pfc, (now, ports)
        paused: dict[str, float] = {}
        marks: dict[str, float] = {}  # link -> ECN marks a second, both directions
        average = 0.0
        if last is not None and now > last[0]:
            for port, counter in ports.items():
                before = last[1].get(port)
                share = (counter.paused_s - before.paused_s) / (now - last[0]) if before else 0.0
                average += share
                link = self._link_of.get(Port(*port))
                if link:
                    paused[link] = round(max(paused.get(link, 0.0), min(share, 1.0)), 3)
                    if before:
                        marks[link] = marks.get(link, 0.0) + (counter.ecn_marked - before.ecn_marked) / (now - last[0])
        with self._lock:
            self.paused = paused
            self.marks = {k: round(v, 1) for k, v in marks.items()}
            self.queue_drops = sum(max(0, n - self._drop_base.get(k, 0)) for k, n in drops.items())
            if last is not None:
                self.paused_series.append((now, average))

    def _sessions(self) -> None:
        rows = []
        for status in lab_status(self.lab):
            bfd_by_link = {self._bfd_link.get(peer): state for peer, state in status.bfd.items()}
            for peer, bgp in sorted(status.bgp.items()):
                link = next((each.name for each in self.fabric.links_of(status.name)
                             if peer in (each.a.node, each.b.node)), None)
                rows.append({"switch": status.name, "peer": peer, "link": link, "bgp": bgp,
                             "bfd": bfd_by_link.get(link, "-")})
        with self._lock:
            self.sessions = rows

    def _follow_files(self) -> None:
        directory = self.state.directory
        for name, mesh in list(self._meshes.items()):
            if not mesh.directory.exists():  # that mesh stopped: its last intervals were in flight
                mesh.unfollow()
                del self._meshes[name]
        for mesh_dir in sorted((directory / "probes").glob("*")) if (directory / "probes").is_dir() else []:
            if mesh_dir.name not in self._meshes and any(mesh_dir.glob("*.json")):
                mesh = ProbeMesh.following(self.lab, mesh_dir)
                mesh.listeners.append(self._interval)
                self._meshes[mesh_dir.name] = mesh
        for log in sorted(directory.glob("jobs/*/rank-0.jsonl")):
            self._rank_logs.setdefault(str(log), JsonlTail(log))
        for log in self._rank_logs.values():
            for record in log.read():
                if record.get("event") in ("iter", "hang") and record.get("retrans_bytes") is not None:
                    with self._lock:  # rank 0 of a RoCE job: what its transport resent
                        self.resent.append((record.get("t", time.monotonic()), record["retrans_bytes"] / 1e6))
                if record.get("event") == "iter":
                    with self._lock:
                        self.steps.append((record["t"], record["step_s"]))
        self._trim()

    def _faults(self) -> None:
        lab = self.lab.reloaded()  # faults come and go with other commands: read them afresh
        faults = lab.visible_faults()
        with self._lock:
            self.faults = None if faults is None else [
                {"id": f["id"], "kind": f["kind"], "since_s": round(time.time() - f["applied_at"]),
                 "targets": [self._link_names.get(Target.parse(t).key, t) for t in f["targets"]]}
                for f in faults]
            self.training = lab.in_training

    def _interval(self, interval: Interval) -> None:
        sent = sum(s.sent for s in interval.samples)
        lost = sum(s.lost for s in interval.samples)
        with self._lock:
            self._intervals.append(interval)
            if sent:
                self.probe_loss.append((interval.t, 100.0 * lost / sent))
            while self._intervals and self._intervals[0].t < interval.t - LOSS_WINDOW_S:
                self._intervals.popleft()
            paths: dict[tuple, list] = {}
            for iv in self._intervals:
                for s in iv.samples:
                    entry = paths.setdefault((s.src, s.dst, s.sport, s.links), [0, 0])
                    entry[0] += s.sent
                    entry[1] += s.lost
            loss: dict[str, float] = {}
            for (_src, _dst, _sport, links), (n_sent, n_lost) in paths.items():
                if n_sent < MIN_PROBES:
                    continue
                for link in links:
                    if link:
                        loss[link] = min(loss.get(link, 100.0), 100.0 * n_lost / n_sent)
            self.loss = {k: round(v, 2) for k, v in loss.items()}

    def _trim(self) -> None:
        horizon = time.monotonic() - CHART_S
        with self._lock:
            for series in (self.steps, self.probe_loss, self.paused_series, self.resent):
                while series and series[0][0] < horizon:
                    series.popleft()

    # --- the page's view ---------------------------------------------------------------------
    def snapshot(self) -> dict:
        now = time.monotonic()
        with self._lock:
            steps = _per_second(self.steps, now)
            return {
                "lab": self.state.lab, "updated": time.time(), "training": self.training,
                "links": {link.name: {"util": self.util.get(link.name, 0.0), "loss_pct": self.loss.get(link.name),
                                      "paused": self.paused.get(link.name, 0.0),
                                      "marks_per_s": self.marks.get(link.name, 0.0),
                                      "down": any(s["link"] == link.name and s["bgp"] != "Established"
                                                  for s in self.sessions)}
                          for link in self.fabric.links},
                "pfc": {"lossless": self.fabric.pfc, "paused_share": PAUSED_SHARE, "marking": self.fabric.ecn,
                        "marks_per_s": round(sum(self.marks.values()), 1),
                        "paused_links": sum(1 for v in self.paused.values() if v > PAUSED_SHARE),
                        "queue_drops": self.queue_drops,
                        "series": [[round(t - now, 1), round(v, 3)] for t, v in self.paused_series]},
                "sessions": list(self.sessions),
                "steps": steps,
                "resent": _per_second(self.resent, now, total=True),
                "probe_loss": [[round(t - now, 1), round(v, 2)] for t, v in self.probe_loss],
                "faults": self.faults,
            }


def _per_second(points, now: float, total: bool = False) -> list[list[float]]:
    """Median (or total) per second, as [seconds ago (negative), value]."""
    buckets: dict[int, list[float]] = {}
    for t, value in points:
        buckets.setdefault(int(t - now), []).append(value)
    return [[second, round(sum(values) if total else statistics.median(values), 4)]
            for second, values in sorted(buckets.items())]
