"""Run the probe mesh on a running lab: start one agent per host, follow their output, and turn
it into per-interval path samples named by the model's links.

A sample is final once every agent has had `grace_s` to count late probes; listeners (the
runner's event log, detectors) get each interval's samples as they become final.

On a lossless lab a probe can be late without being lost: a port held by PFC for long (a storm,
pause frames) holds it. Probes missing on a path that crossed a link held for at least
LONG_PAUSE_S during the interval are `held`, not lost: the counters cannot tell a held probe
from a lost one, and pause counters, not late probes, are the evidence for a pause (detect/
pauses.py). Short pauses (congestion, milliseconds) never delay a probe past the grace, so they
excuse nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from twin.errors import TwinError
from twin.events import JsonlTail
from twin.lab.handle import Lab, python_module
from twin.lab.pfc import published as pfc_counters
from twin.model.fabric import Fabric
from twin.model.nics import fabric_nics, nic_links
from twin.probes.agent import TRACE_PPS, TRACE_ROUNDS
from twin.probes.focus import Focus
from twin.probes.pace import extra_probes, floor_per_interval
from twin.probes.select import Directions, Selection, select
from twin.probes.selection import (
    PATHS_PER_LINK,
    REPORT_MS,
    CoverPlan,
    PairPlan,
    cover_plan,
    plan,
    probe_load,
    route_every,
    routes_only_pairs,
)
from twin.probes.trace import unless_silent
from twin.probes.transitions import Transitions
from twin.procs import INSTRUMENT_NICE, alive, set_priority, terminate

PROBE_PORT = 47100
POLL_S = 0.1
RESELECT_QUIET_S = 1.0  # cover: select again once rediscovered paths have stopped arriving this long
PATHS_TOLD_EVERY_S = 1.0  # path listeners hear of changed paths at most this often
STUCK_AGENT_S = 5.0  # an agent whose marks are this far behind the furthest agent's is not waited for
SELECTION = ".select.json"  # cover: a host's selected flows, next to its agent's config
PROBES_FILE = "probes.jsonl"  # in the results folder: every interval's samples (workloads/probes.py)
GRACE_S = 0.5  # an agent counts a probe this late, then writes its interval
LONG_PAUSE_S = 0.1  # a port held this long (or longer) can make a probe late
PAUSES_EVERY_S = 0.25  # below the grace: every pause that can make a probe late is seen


@dataclass
class PathSample:
    src: str  # host:nic labels
    dst: str
    sport: int
    links: tuple[str | None, ...]  # link names in order; None where discovery got no answer
    sent: int
    received: int
    owd_p50_ms: float | None = None
    owd_p99_ms: float | None = None
    rtt_p50_ms: float | None = None
    rtt_p99_ms: float | None = None
    held: int = 0  # unanswered while a link of the path was held by PFC: late, not known lost
    rerouting: bool = False  # the interval overlapped a routing transition (probes/transitions.py)
    # unanswered toward an agent that had not written the interval when it was counted (starved
    # for STUCK_AGENT_S by a busy machine): its receptions are unknown, not lost
    unreported: int = 0

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.received - self.held - self.unreported)


@dataclass
class Interval:
    bucket: int
    t: float  # CLOCK_MONOTONIC at the interval's start
    samples: list[PathSample] = field(default_factory=list)


def address_links(fabric: Fabric) -> dict[str, str]:
    """Switch interface address -> link name: what a time-exceeded offender address names."""
    table = {}
    for link in fabric.links:
        for end in (link.a, link.b):
            if fabric.nodes[end.node].is_switch and end.address is not None:
                table[str(end.address.ip)] = link.name
    return table


class PathNames:
    """Link names of a discovered path: the source NIC's host link, the link each answering
    switch's ingress address names, the destination's host link.

    A hop that did not answer (its TTL probe lost: a flow whose packets a link drops loses its
    discovery past that link too) is named from the model where its neighbours pin it: the switch
    it entered is the far end of the next hop's link (the last one is the destination's leaf), the
    switch before it the near end of the previous one, and two switches share at most one link.
    Without that, the loss of such a flow was charged to the links around the silent hop. A hop
    every shortest path between the two leaves takes through one switch (the only spine of a
    plane, the only superspine) is that switch, answered or not: when it dies and its routes go
    with it, nothing on the way answers, and the silent path named only the two host links, which
    were blamed for it. Two silent hops in a row with several switches to choose from stay None:
    ECMP could have taken any of them."""

    def __init__(self, fabric: Fabric):
        self.addresses = address_links(fabric)
        self.host_link = {f"{link.b.node}:{link.b.ifname}": link.name for link in fabric.links if link.kind == "host"}
        # a dual-port NIC's label -> {leaf: its link from it}: a probe to it arrives on either port
        self.into: dict[str, dict[str, str]] = {}
        for nic in fabric_nics(fabric):
            if len(nic.interfaces) > 1:
                self.into[nic.label] = {link.a.node: link.name for link in nic_links(fabric, nic.host, nic.ifname)}
        self.ends = {link.name: (link.a.node, link.b.node) for link in fabric.links}
        self.entered = {str(end.address.ip): end.node for link in fabric.links for end in (link.a, link.b)
                        if fabric.nodes[end.node].is_switch and end.address is not None}
        self.between = {frozenset(ends): name for name, ends in self.ends.items()}
        self.switch_graph = fabric.switch_graph()
        self._distances: dict[str, dict[str, int]] = {}  # leaf -> switch -> hops, as asked
        self._only: dict[tuple[str, str, int], list[str | None]] = {}  # _only_switches' answers

    def path(self, src: str, offenders: list[str | None], dst: str) -> tuple[str | None, ...]:
        first = self.host_link[src]
        # switches[i]: the switch the i-th link enters (the first is the source's leaf)
        switches = [self._other(first, src.split(":")[0]), *(self.entered.get(a) if a else None for a in offenders)]
        last = self._last_link(dst, switches[-1])
        names = [first, *(self.addresses.get(a) if a else None for a in offenders), last]
        if None not in names:
            return tuple(names)
        if last is not None:
            switches[-1] = switches[-1] or self._other(last, dst.split(":")[0])
            for i, only in enumerate(self._only_switches(switches[0], switches[-1], len(switches))):
                switches[i] = switches[i] or only
        for i in range(len(switches) - 2, 0, -1):  # an unanswered hop: the near end of the next link
            if switches[i] is None and switches[i + 1] is not None and names[i + 1] is not None:
                switches[i] = self._other(names[i + 1], switches[i + 1])
        for i in range(1, len(names) - 1):
            if names[i] is None and switches[i - 1] and switches[i]:
                names[i] = self.between.get(frozenset((switches[i - 1], switches[i])))
        return tuple(names)

    def _last_link(self, dst: str, last_switch: str | None) -> str | None:
        """The link a probe to `dst` arrives on: its own, or for a port of a dual-port NIC the NIC's
        link from the switch the trace ended at (None if that switch did not answer: the last spine
        hashes between the NIC's leaves, which the model cannot tell)."""
        into = self.into.get(dst)
        if into is None:
            return self.host_link[dst]
        return into.get(last_switch) if last_switch else None

    def _other(self, link: str, node: str) -> str:
        a, b = self.ends[link]
        return b if a == node else a

    def _only_switches(self, first: str, last: str, count: int) -> list[str | None]:
        """Per hop from leaf `first` to leaf `last`, the one switch every shortest path between
        them crosses there (None where there are several); all None unless the shortest paths
        have `count` switches."""
        key = (first, last, count)
        if key not in self._only:
            near, far = self._from(first), self._from(last)
            length = near.get(last)
            layers: list[set[str]] = [set() for _ in range(count)]
            if length is not None and length + 1 == count:
                for node, hops in near.items():
                    if hops + far.get(node, count) == length:
                        layers[hops].add(node)
            self._only[key] = [next(iter(layer)) if len(layer) == 1 else None for layer in layers]
        return self._only[key]

    def _from(self, leaf: str) -> dict[str, int]:
        if leaf not in self._distances:
            self._distances[leaf] = nx.single_source_shortest_path_length(self.switch_graph, leaf)
        return self._distances[leaf]


class ProbeMesh:
    def __init__(self, lab: Lab, name: str, pairs: str = "cover", interval_ms: int = 100, report_ms: int = 500,
                 refresh_s: float = 30.0, seed: int = 1, grace_s: float = GRACE_S, paths_per_link: int = PATHS_PER_LINK,
                 rtt_every: int = 1, focus: int = 1, max_pps: int | None = None, min_link_pps: int = 0):
        self.lab, self.state, self.fabric, self.name = lab, lab.state, lab.fabric, name
        fabric = lab.fabric
        self.paths_per_link = paths_per_link if pairs == "cover" else None
        # cover: flows over directions that carry fewer probes a second are probed more often (probes/pace.py)
        self.floor = floor_per_interval(min_link_pps, interval_ms, paths_per_link) if self.paths_per_link else 0
        if self.paths_per_link:
            covering = cover_plan(fabric, paths_per_link, seed, self.floor)
            self.plans: list[PairPlan] = covering.plans
            self.load = cover_load(covering, paths_per_link, interval_ms, report_ms)
        else:
            self.plans = plan(fabric, pairs, seed)
            self.load = probe_load(self.plans, interval_ms)
        self.directions = Directions(fabric)
        self.selection: Selection | None = None
        self._rows: set[tuple] | None = None  # the selection as last written for the agents
        self._selected_at = 0.0  # monotonic time of the last selection (cover)
        self._discovered_at = 0.0  # when the last paths record was read
        self._paths_at = 0.0  # when the last one that changed a flow's path was read
        self._paths_told = (0.0, 0.0)  # (when, record time) path listeners were last told
        self.interval_ms, self.report_ms, self.refresh_s, self.grace_s = interval_ms, report_ms, refresh_s, grace_s
        self.rtt_every = rtt_every
        # cover: flows over the links of a lossy path are probed `focus` times an interval for a while
        # (probes/focus.py), the mesh staying within max_pps
        self.max_pps = max_pps
        self.focus = Focus(focus, budget=0) if focus > 1 and self.paths_per_link else None  # budget: at selection
        self._hops: dict[tuple[str, str, int], tuple] = {}  # each discovered flow's directed hops, as last selected
        self._crossing: dict[tuple, list] = {}  # directed hop -> the discovered flows over it (focus)
        self._missed: list[tuple[str, str, int]] = []  # flows whose echoes the agents missed, since the last drain
        self.directory = lab.paths.root / "probes" / name
        self.names = PathNames(fabric)
        self.link_of_port = {(end.node, end.ifname): link.name for link in fabric.links for end in (link.a, link.b)}
        self.held_at: dict[str, float] = {}  # link -> last time (monotonic) one of its directions was held long
        self._pauses_due = 0.0
        self.transitions = Transitions()  # route changes (the runner tells) against rediscovered paths
        self.pids: dict[str, int] = {}
        self.keep_logs: Path | None = None  # agents' logs with something in them are copied here at the end
        self.logs: dict[str, JsonlTail] = {}
        self.paths: dict[tuple[str, str, int], tuple[str | None, ...]] = {}  # latest
        self._history: dict[tuple[str, str, int], list[tuple[float, tuple]]] = {}  # (discovered at, links)
        # when every hop of it last answered, and its links then
        self._complete: dict[tuple[str, str, int], tuple[float, tuple]] = {}
        self.active: dict[tuple[str, str], list[int]] = {}
        self.listeners: list[Callable[[Interval], None]] = []
        self.path_listeners: list[Callable[[float], None]] = []
        self._sent: dict[int, dict] = defaultdict(dict)
        self._recv: dict[int, dict] = defaultdict(dict)
        self._rtt: dict[int, dict] = defaultdict(dict)
        self._final = -1
        self._marks: dict[str, int] = {}  # host -> the last bucket its agent has written in full
        self._agents_done = False
        self.late_rows = 0  # reception rows for buckets already counted (should stay 0)
        # How far behind this process counted: an agent's mark read this late, listeners this slow.
        self.lag = {"mark_read_max_s": 0.0, "listener_max_s": 0.0}
        self.epoch = 0.0
        self.stats: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"probes-{name}", daemon=True)

    # --- lifecycle ------------------------------------------------------------------------
    @classmethod
    def following(cls, lab: Lab, directory: Path) -> ProbeMesh:
        """Read the results of a mesh another process runs (its agents' output files), without
        starting or stopping anything: listeners get its intervals as they are counted."""
        configs = {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))
                   if not p.name.endswith(SELECTION)}
        if not configs:
            raise TwinError(f"{directory} holds no probe agent configuration")
        first = next(iter(configs.values()))
        mesh = cls(lab, directory.name, interval_ms=first["interval_ms"],
                   report_ms=first["report_ms"], grace_s=first["grace_s"])
        mesh.directory, mesh.epoch = directory, first["epoch"]
        mesh.logs = {host: JsonlTail(Path(config["output"])) for host, config in configs.items()}
        mesh._thread.start()
        return mesh

    def unfollow(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def start(self) -> None:
        self.lab.refuse_split("the probe mesh (its agents count what every host receives)")
        if self.directory.exists():
            raise TwinError(f"a probe mesh named {self.name} already runs on lab {self.state.lab}",
                            hint="stop it first, or `twin lab down` the lab")
        self.directory.mkdir(parents=True)
        self.epoch = time.monotonic()
        labels = sorted({p.src.label for p in self.plans} | {p.dst.label for p in self.plans})
        # Every host in the mesh runs an agent: it sends its own probes and answers others'.
        for host in sorted({p.src.host for p in self.plans} | {p.dst.host for p in self.plans}):
            mine = [p for p in self.plans if p.src.host == host]
            local = sorted({(p.src.label, p.src.ifname, p.src.address, p.src.shares_address)
                            for p in self.plans if p.src.host == host}
                           | {(p.dst.label, p.dst.ifname, p.dst.address, p.dst.shares_address)
                              for p in self.plans if p.dst.host == host})
            config = {
                "epoch": self.epoch, "interval_ms": self.interval_ms, "report_ms": self.report_ms,
                "grace_s": self.grace_s, "refresh_s": self.refresh_s, "rtt_every": self.rtt_every,
                "port": PROBE_PORT, "nics": labels,
                "local_nics": [{"label": lab, "ifname": ifn, "address": addr, "shared": shared}
                               for lab, ifn, addr, shared in local],
                "pairs": [{"src": p.src.label, "dst": p.dst.label, "dst_address": p.dst.address,
                           "hops": p.hops, "sports": list(p.sports)} for p in mine],
                "output": str(self.directory / f"{host}.jsonl"),
                "select": str(self.directory / f"{host}{SELECTION}") if self.paths_per_link else None,
                "watch_echoes": self.focus is not None,
            }
            path = self.directory / f"{host}.json"
            path.write_text(json.dumps(config))
            self.pids[host] = self.lab.spawn_owned(f"probes/{self.name}/{host}",
                                                   python_module("twin.probes.agent", str(path)),
                                                   self.directory / f"{host}.log", node=host).pid
            self.logs[host] = JsonlTail(self.directory / f"{host}.jsonl")
        self._thread.start()

    def stop(self) -> dict:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        # Agents stop sending at SIGTERM, answer late probes for grace_s, flush, then exit; only
        # then is every bucket complete (counting them at _stop lost the last ones' receptions).
        terminate(list(self.pids.values()), grace_s=self.grace_s + 3.0)
        self._agents_stopped()
        self._drain()
        self.lab.forget(self.lab.owned("worker", f"probes/{self.name}/"))
        self._keep_agent_logs()
        shutil.rmtree(self.directory, ignore_errors=True)
        return self.stats

    def _agents_stopped(self) -> None:
        """From now on every bucket is counted, marked or not: the agents have written all. Under
        the lock: a follower still behind (stop's join timed out) may be inside a drain, between
        reading the files and counting; seeing the flag there, it counted every bucket up to the
        last sent, the rows it had not read yet as lost (a healthy run "lost" 3,174 probes that
        the agents' own files show received)."""
        with self._lock:
            self._agents_done = True

    def _keep_agent_logs(self) -> list[Path]:
        """Agents' logs that say something (a traceback, a warning) outlive the lab directory, which
        teardown deletes: a hint may point at them."""
        if self.keep_logs is None:
            return []
        kept = []
        for log in sorted(self.directory.glob("*.log")):
            if log.stat().st_size:
                self.keep_logs.mkdir(parents=True, exist_ok=True)
                kept.append(Path(shutil.copy(log, self.keep_logs / log.name)))
        return kept

    def _logs_hint(self, host: str | None = None) -> str:
        """The failed agent's last words, and where every agent's log outlives the mesh."""
        kept = self._keep_agent_logs()
        log = self.directory / f"{host}.log" if host else None
        tail = log.read_text()[-300:].strip() if log is not None and log.is_file() else ""
        where = (f"agent logs: {kept[0].parent}" if kept else "the agents logged nothing") if \
            self.keep_logs is not None else f"agent logs: {self.directory} (deleted when the mesh stops)"
        return f"{tail}\n{where}" if tail else where

    def refresh_paths(self) -> None:
        """Ask every agent to rediscover its paths now (routes changed)."""
        self.transitions.refreshed(time.monotonic())
        for pid in self.pids.values():
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass

    def failed_agents(self) -> list[str]:
        return [host for host, pid in self.pids.items() if not alive(pid) and host not in self.stats]

    # --- following --------------------------------------------------------------------------
    def _follow(self) -> None:
        # The follower counts the intervals and runs the probe detectors (listeners): an instrument,
        # ahead of the load it watches, as the agents are (procs.py). At the default priority beside a
        # 16-rank allreduce on 2 cores, a verdict reached the run 0.13-1.03 s (median 0.36 s) after
        # its interval could be counted (rail4, one-way drops: live against `twin detect replay`).
        set_priority(INSTRUMENT_NICE)
        while not self._stop.wait(POLL_S):
            self._drain()

    def _drain(self) -> None:
        with self._lock:
            for host, log in self.logs.items():
                self._read(host, log)
            # An agent read before the others (this thread may be held for seconds between two
            # files) can look far behind without being so: read it again before not waiting for it.
            for host in self._laggards():
                self._read(host, self.logs[host])
            self._note_pauses()
            self._finalise()
            if self._missed:  # an echo missed: focus now, not when its interval is counted
                missed, self._missed = self._missed, []
                self._refocus_on(missed)
            now = time.monotonic()
            if self.selection is not None and self._discovered_at > self._selected_at and \
                    now - self._discovered_at >= RESELECT_QUIET_S:
                if self._paths_at > self._selected_at:
                    self._select()
                else:  # rediscovered, nothing moved: the selection stands, and is current
                    self._selected_at = now
                    self.transitions.selected(now)
            if self._paths_at > self._paths_told[0] and now - self._paths_told[0] >= PATHS_TOLD_EVERY_S:
                self._paths_told = (now, self._paths_told[1])
                for listener in self.path_listeners:
                    listener(self._paths_told[1] - self.epoch)

    def _read(self, host: str, log: JsonlTail) -> None:
        for record in log.read():
            self._take(host, record)

    def _note_pauses(self) -> None:
        """Links with a direction held for LONG_PAUSE_S or more, as the PFC controller publishes,
        every PAUSES_EVERY_S: a pause shorter than that delays no probe past the grace, and a
        pod128 counters file (4,608 ports) took 24 ms to read into counters, at every drain."""
        now = time.monotonic()
        if not self.fabric.pfc or now < self._pauses_due:
            return
        self._pauses_due = now + PAUSES_EVERY_S
        document = pfc_counters.read(self.state.directory)
        for port, held_s in pfc_counters.paused_for(document).items():
            if held_s >= LONG_PAUSE_S:
                link = self.link_of_port.get(port)
                if link:
                    self.held_at[link] = document["t_mono"]

    def _take(self, host: str, record: dict) -> None:
        kind = record["type"]
        if kind == "paths":
            moved = False
            unroutable = set(record.get("unroutable", ()))  # ports a switch had no route for
            for sport, hops in record["paths"].items():
                key = (record["src"], record["dst"], int(sport))
                found = self.names.path(record["src"], hops, record["dst"])
                complete_at, complete = self._complete.get(key, (float("-inf"), None))
                stale = self.transitions.changed_after(complete_at)
                # the last complete path: an earlier rediscovery during the same transition may have
                # found it silent already (a switch that had routes still, toward a dead one)
                links = unless_silent(complete, found, stale, unroutable=int(sport) in unroutable)
                if None not in found:
                    self._complete[key] = (record["t"], found)
                if links != self.paths.get(key):
                    moved = True
                    self._history.setdefault(key, []).append((record["t"], links))
                self.paths[key] = links
            self.active[(record["src"], record["dst"])] = record["active"]
            self.transitions.discovered(host, record["t"])
            self._discovered_at = time.monotonic()
            if moved:  # select again, and tell (a pod128 rediscovery is 1,300 records, mostly the same)
                self._paths_at = self._discovered_at
                self._paths_told = (self._paths_told[0], record["t"])
        elif kind == "sent":
            self._sent[record["b"]].update({(s, d, p): n for s, d, p, n in record["rows"]})
        elif kind in ("recv", "rtt"):
            if record["b"] <= self._final:
                self.late_rows += 1
                return
            table = self._recv if kind == "recv" else self._rtt
            table[record["b"]].update({(s, d, p): rest for s, d, p, *rest in record["rows"]})
        elif kind == "miss":
            self._missed += [tuple(flow) for flow in record["flows"]]
        elif kind == "mark":
            self._marks[host] = record["b"]
            if record.get("t"):
                self.lag["mark_read_max_s"] = max(self.lag["mark_read_max_s"], round(time.monotonic() - record["t"], 3))
        elif kind in ("start", "stop"):
            self.stats.setdefault(host, {}).update({f"{kind}_{k}": v for k, v in record.items() if k != "type"})

    def _finalise(self) -> None:
        """A bucket is counted once every agent has written it in full (its mark), or at the end.
        An agent whose marks lag the furthest agent's by STUCK_AGENT_S (starved, or dead) is not
        waited for, and the probes toward it in the buckets counted without it are `unreported`,
        not lost (a healthy fabric under a busy collective lost none: its agents were starved).
        The rule compares marks with marks, never with this process's clock: the runner may itself
        be kept off the CPU for seconds on a busy machine, and a bucket counted by the clock before
        its rows were read showed a healthy fabric's probes as lost."""
        report_s = self.report_ms / 1000
        marks = {host: self._marks.get(host, -1) for host in self.logs}
        laggards = self._laggards()
        marked = min((b for host, b in marks.items() if host not in laggards),
                     default=max(marks.values(), default=-1)) + 1
        # A mesh followed from its files that has stopped (agents said so, or its folder is gone):
        # what not every agent marked was in flight at the stop, not lost.
        ripe = min(self._marks.values(), default=-1) + 1 if self._ended_elsewhere() else marked
        if self._agents_done:
            ripe = max([self._final, *self._sent]) + 1
        while self._final + 1 < ripe:
            bucket = self._final + 1
            self._final = bucket
            sent = self._sent.pop(bucket, {})
            recv = self._recv.pop(bucket, {})
            rtt = self._rtt.pop(bucket, {})
            if not sent or self.epoch + bucket * report_s < self._all_started():
                # Before every agent was receiving (containers start one by one): a probe to an
                # agent not yet up is not a probe the fabric lost.
                continue
            interval = Interval(bucket, self.epoch + bucket * report_s)
            held_since = interval.t - LONG_PAUSE_S
            rerouting = self.transitions.rerouting(interval.t, interval.t + report_s)
            unreported = {host for host in laggards if marks[host] < bucket} if not self._agents_done else set()
            for key, count in sorted(sent.items()):
                got = recv.get(key)
                echo = rtt.get(key)
                links = self._path_at(key, interval.t)
                received = got[0] if got else 0
                held = count - received if received < count and any(
                    self.held_at.get(link, float("-inf")) >= held_since for link in links if link) else 0
                missing = max(0, count - received - held) if key[1].split(":")[0] in unreported else 0
                interval.samples.append(PathSample(
                    key[0], key[1], key[2], links, count, received,
                    got[1] if got else None, got[2] if got else None, echo[1] if echo else None,
                    echo[2] if echo else None, held, rerouting, missing))
            self._refocus(interval)
            began = time.monotonic()
            for listener in self.listeners:
                listener(interval)
            self.lag["listener_max_s"] = max(self.lag["listener_max_s"], round(time.monotonic() - began, 3))

    def _laggards(self) -> set[str]:
        """Agents whose marks are STUCK_AGENT_S behind the furthest agent's."""
        marks = {host: self._marks.get(host, -1) for host in self.logs}
        furthest = max(marks.values(), default=-1)
        return {host for host, b in marks.items() if furthest - b >= STUCK_AGENT_S * 1000 / self.report_ms}

    def _all_started(self) -> float:
        """When the last agent had its sockets open (its `start` record); +inf until all have."""
        starts = [self.stats.get(host, {}).get("start_t") for host in self.logs]
        return max(starts) if starts and None not in starts else float("inf")

    def _ended_elsewhere(self) -> bool:
        if self.pids or self._agents_done:  # this process runs the mesh: stop() counts the end
            return False
        stopped = [h for h in self.logs if any(k.startswith("stop_") for k in self.stats.get(h, {}))]
        return not self.directory.exists() or (bool(self.logs) and len(stopped) == len(self.logs))

    def _path_at(self, key: tuple[str, str, int], t: float) -> tuple[str | None, ...]:
        """The path the probes of an interval starting at `t` took: the last one discovered before
        it started. Rediscovery after a route change must not move earlier losses onto the new path."""
        history = self._history.get(key, [])
        before = [links for found, links in history if found <= t]
        return before[-1] if before else (history[0][1] if history else ())

    # --- cover: which discovered flows are probed ---------------------------------------------
    def _select(self) -> None:
        """Select the flows that cross every directed link paths_per_link times from every
        agent's discovered paths, and tell the agents whose selection changed."""
        self._hops = {key: self.directions.hops(key[0], links, key[1]) for key, links in self.paths.items()}
        selection = select(self._hops, self.paths_per_link, routes_only=routes_only_pairs(self.plans))
        selection.pace(self._hops, self.floor)
        crossing: dict[tuple, list] = defaultdict(list)
        for flow, hops in self._hops.items():
            for hop in set(hops):
                crossing[hop].append(flow)
        self._crossing = dict(crossing)
        self.selection, self._selected_at = selection, time.monotonic()
        self.transitions.selected(self._selected_at)
        if self.focus is not None:
            flows = (len(selection.flows) + extra_probes(selection.paces)
                     + len(selection.routes) / route_every(self.interval_ms, self.report_ms))
            self.focus.budget = Focus.budget_for(len(selection.flows), self.focus.times, self.interval_ms,
                                                 flows * 1000 / self.interval_ms, self.max_pps)
        self._write_rows()
        active: dict[tuple[str, str], list[int]] = {pair: [] for pair in self.active}
        for src, dst, sport in probed(selection):
            active.setdefault((src, dst), []).append(sport)
        self.active = active

    def _write_rows(self) -> None:
        """Write the selection for the agents whose part changed, and signal them. A row is
        [src, dst, sport, every, times]: a flow testing a route is probed in one interval of
        `every`, a paced flow its pace's times an interval, a focused flow (selected or not) the
        focus's, or its pace's if more."""
        selection = self.selection
        every = route_every(self.interval_ms, self.report_ms)
        focused, times = (set(self.focus.focused()), self.focus.times) if self.focus else (set(), 1)
        rows = [[*flow, 1, max(times if flow in focused else 1, selection.times_of(flow))] for flow in selection.flows]
        rows += [[*flow, 1, times] if flow in focused else [*flow, every, 1] for flow in selection.routes]
        rows += [[*flow, 1, times] for flow in sorted(focused - set(selection.flows) - set(selection.routes))]
        before, self._rows = self._rows, {tuple(row) for row in rows}
        by_host: dict[str, list] = defaultdict(list)
        for row in rows:
            by_host[row[0].split(":")[0]].append(row)
        # a flow whose pace changed (between links and routes, in or out of focus) changed too
        changed = {row[0].split(":")[0] for row in self._rows ^ (before or set())}
        for host, pid in self.pids.items():
            if before is not None and host not in changed:
                continue
            target = self.directory / f"{host}{SELECTION}"
            scratch = target.with_suffix(".tmp")
            scratch.write_text(json.dumps(by_host.get(host, [])))
            os.replace(scratch, target)  # an agent never reads half a file
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGUSR2)
                except ProcessLookupError:
                    pass

    def _refocus(self, interval: Interval) -> None:
        """Focus on the links of the flows that lost probes in this interval (probes/focus.py)."""
        self._refocus_on([(s.src, s.dst, s.sport) for s in interval.samples if s.lost and not s.rerouting])

    def _refocus_on(self, lossy: list[tuple[str, str, int]]) -> None:
        if self.focus is None or self.selection is None or self._agents_done:
            return
        if self.focus.observe(time.monotonic(), lossy, self._hops, self._crossing):
            self._write_rows()

    def selected(self) -> dict:
        """The probed flows and the coverage they give, as discovered (cover), for reports."""
        if self.selection is None:
            return {}
        return link_load(self.selection, self.load.get("hops", 0), self.paths_per_link, self.interval_ms)

    # --- what the model says -----------------------------------------------------------------
    def covered_links(self) -> set[str]:
        """Links the probed flows cross (cover: the selected ones; else every discovered path)."""
        with self._lock:
            flows = probed(self.selection) if self.selection is not None else self.paths
            return {link for flow in flows for link in self.paths.get(flow, ()) if link}

    def discovery_timeout_s(self) -> float:
        """How long the first discovery may take: the busiest agent's TTL probes at its pace, every
        round resent, twice over for a busy machine (pod128: 4,000 a host, 24 s); at least 20 s."""
        traces: dict[str, int] = defaultdict(int)
        for p in self.plans:
            traces[p.src.host] += len(p.sports) * max(0, p.hops - 1)
        return max(20.0, 2 * TRACE_ROUNDS * max(traces.values(), default=0) / TRACE_PPS)

    def wait_for_paths(self, timeout_s: float | None = None) -> None:
        """Block until every agent has published its first discovered paths."""
        timeout_s = self.discovery_timeout_s() if timeout_s is None else timeout_s
        pairs = {(p.src.label, p.dst.label) for p in self.plans}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._drain()
            if pairs <= set(self.active):
                if self.paths_per_link:
                    with self._lock:
                        self._select()
                return
            failed = self.failed_agents()
            if failed:
                raise TwinError(f"probe agent on {failed[0]} exited", hint=self._logs_hint(failed[0]))
            time.sleep(0.1)
        missing = sorted(pairs - set(self.active))
        raise TwinError(f"probe agents found no paths within {timeout_s:.0f} s for {len(missing)} of "
                        f"{len(pairs)} NIC pairs (e.g. {missing[0][0]} -> {missing[0][1]})",
                        hint=self._logs_hint())


def probed(selection: Selection) -> list[tuple[str, str, int]]:
    """Every flow a selection probes: those covering links, then those testing routes."""
    return selection.flows + selection.routes


def cover_load(covering: CoverPlan, k: int, interval_ms: int, report_ms: int = REPORT_MS) -> dict:
    """What a cover plan costs and sees, as the model draws it: probes per second, per NIC and per
    link direction, and what it leaves short or ambiguous."""
    return {**probe_load(covering.plans, interval_ms, report_ms),
            **link_load(covering.expected, covering.hops, k, interval_ms)}


def link_load(selection: Selection, hops: int, k: int, interval_ms: int) -> dict:
    """Probes per second per directed link (the fewest and the median) and what the selection
    leaves short: the figures that say what the cover mesh can see."""
    summary = selection.summary(hops, k)
    per_s = 1000 / interval_ms
    return {"flows": summary["flows"], "route_flows": summary["route_flows"], "paths_per_link": k, "hops": hops,
            "paced_flows": summary["paced_flows"], "paced_probes_per_s": round(summary["paced_probes"] * per_s, 1),
            "link_pps_min": round(summary["links_min"] * per_s, 1),
            "link_pps_median": round(summary["links_median"] * per_s, 1),
            "hops_short": hops - summary["hops_covered"], "ambiguous": summary["ambiguous"]}
