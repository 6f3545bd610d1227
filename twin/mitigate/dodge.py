"""Hash dodging (end-host rerouting). ECMP hashes the 5-tuple, so a flow's source port chooses
its path: when a flow loses packets, its sender learns the flow's path (TTL-limited datagrams
from the flow's own socket), decides which links to avoid (the links detectors have named on
that path, else every switch-to-switch link of it), then opens fresh source ports, learns each
one's path the same way, and moves the flow to the first whose path avoids them. Routing never
has to react; this is what operators do against a silent drop until the link is repaired.

When a detector names a new link, every flow not being moved already has its path learned at
once and those crossing that link move before they lose packets: waiting for each flow's own
loss leaves a flow on the bad link for as long as its luck holds (at 2 % loss and 30 packets/s,
about one flow in 430 sends 10 s without a loss). A flow that was being moved then is swept once
its move lands (workloads/flows.py): its move was planned on what had been named before.
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import NamedTuple

from twin.lab.handle import Lab
from twin.lab.traffic import bound_udp_socket
from twin.model.fabric import link_key
from twin.model.nics import Nic
from twin.probes.mesh import PathNames
from twin.probes.selection import equal_cost_paths
from twin.sockopts import report_errors, send, time_exceeded

TRACE_FLOW = 0xFFFF  # flow id in trace datagrams (they expire before the receiver anyway)
CANDIDATES = 8  # fresh source ports tried per move: with 2 paths, P(none avoids) = 1/256
ANSWER_WAIT_S = 0.3
SWEEP_TRACES = 3  # a path crossing a 2 % drop stays unresolved after three traces about once in 10^4


@dataclass
class Request:
    flow: int
    label: str
    src: Nic
    dst: Nic
    sock: socket.socket


class Move(NamedTuple):
    """The dodger's answer to a request: the flow's new socket (None: it stays where it is);
    `settled`: its losses so far are dealt with (packets already sent on the old path may still be lost)."""
    flow: int
    sock: socket.socket | None
    settled: bool = True


class _Plan(NamedTuple):
    req: Request
    current: tuple  # the flow's path now
    trigger: str
    avoid: set[str]
    because: str
    candidates: list[socket.socket]  # fresh source ports, one of which the flow may move to


def _trace(req: Request) -> tuple[socket.socket, Nic, Nic]:
    return req.sock, req.src, req.dst


def named_links(path: tuple[str | None, ...], suspects: set[str]) -> set[str]:
    return {link for link in path if link and link_key(link) in suspects}


def links_to_avoid(path: tuple[str | None, ...], suspects: set[str]) -> tuple[set[str], str]:
    """The links of `path` detectors have named; if none, every switch-to-switch link of it
    (the host links at both ends cannot be avoided)."""
    named = named_links(path, suspects)
    if named:
        return named, "named by a detector"
    return {link for link in path[1:-1] if link}, "the flow's own path"


def pick(avoid: set[str], current: tuple, candidates: list[tuple]) -> tuple[int, tuple] | None:
    """(index, path) of the candidate path crossing fewest links to avoid (only fully discovered
    paths count); None if none crosses fewer than the current path."""
    known = [(i, path) for i, path in enumerate(candidates) if None not in path]
    best = min(known, key=lambda c: len(avoid & set(c[1])), default=None)
    if best is None or len(avoid & set(best[1])) >= len(avoid & set(current)):
        return None
    return best


class Dodger:
    """Runs beside a flows workload: `request()` when a flow lost packets, `sweep()` all idle
    flows when `named` has changed; answers come back through `moves` for the sending thread."""

    def __init__(self, lab: Lab, events, workload: str, dport: int):
        self.lab, self.fabric, self.events, self.workload, self.dport = lab, lab.fabric, events, workload, dport
        fabric = lab.fabric
        self.names = PathNames(fabric)
        self.switch_links = {node: {link_key(link) for link in links} for node, links in fabric.switch_links().items()}
        self.suspects: set[str] = set()
        self.named = 0  # bumped whenever a detector names something new
        self.moves: queue.Queue = queue.Queue()
        self._requests: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"dodge-{workload}", daemon=True)
        events.subscribe("verdict", self._verdict)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """After the flows thread has ended: moves it never adopted leave their sockets here."""
        self._requests.put(None)
        self._thread.join(timeout=5)
        while not self.moves.empty():
            move = self.moves.get()
            if move.sock is not None:
                move.sock.close()

    def request(self, req: Request) -> None:
        self._requests.put(req)

    def sweep(self, reqs: list[Request]) -> None:
        self._requests.put(reqs)

    def _verdict(self, record: dict) -> None:
        before = len(self.suspects)
        if record.get("links"):  # links the probes cannot tell apart: avoid them all
            self.suspects |= {link_key(link) for link in record["links"]}
        elif record.get("link"):
            self.suspects.add(link_key(record["link"]))
        elif record.get("node") in self.switch_links:
            self.suspects |= self.switch_links[record["node"]]
        if len(self.suspects) > before:
            self.named += 1

    def _run(self) -> None:
        """Act on everything queued at once: each round of path discovery waits up to
        ANSWER_WAIT_S for its answers, so flows handled one by one would queue for seconds."""
        stopping = False
        while not stopping:
            batch = [self._requests.get()]
            while not self._requests.empty():  # the only consumer: what is there stays there
                batch.append(self._requests.get_nowait())
            stopping = None in batch
            lost = [item for item in batch if isinstance(item, Request)]
            swept = [req for item in batch if isinstance(item, list) for req in item]
            flows = [(req, path, "loss") for req, path in zip(lost, self.paths([_trace(req) for req in lost]))]
            self._move(flows + (self._sweep(swept) if swept else []))

    def _sweep(self, reqs: list[Request]) -> list[tuple[Request, tuple, str]]:
        """The swept flows whose path crosses a named link; the others are released. A path with
        a hop that did not answer (its trace may have been dropped on the bad link) is learned
        again, up to SWEEP_TRACES times."""
        started = time.monotonic()
        crossing, unknown = [], reqs
        for _attempt in range(SWEEP_TRACES):
            again = []
            for req, path in zip(unknown, self.paths([_trace(req) for req in unknown])):
                if named_links(path, self.suspects):
                    crossing.append((req, path, "verdict"))
                elif None in path:
                    again.append(req)
                else:
                    self.moves.put(Move(req.flow, None, settled=False))
            unknown = again
            if not unknown:
                break
        for req in unknown:
            self.moves.put(Move(req.flow, None, settled=False))
        self.events.emit("dodge_sweep", workload=self.workload, flows=len(reqs), crossing=len(crossing),
                         unresolved=len(unknown), suspects=sorted(self.suspects),
                         took_s=round(time.monotonic() - started, 3))
        return crossing

    def _move(self, flows: list[tuple[Request, tuple, str]]) -> None:
        """Move each (request, current path, trigger) to the best of CANDIDATES fresh source
        ports; all candidates of all flows are traced at once. The trigger is the flow's own
        `loss`, or a `verdict` that named a link on its path."""
        started = time.monotonic()
        plans = []
        for req, current, trigger in flows:
            avoid, because = links_to_avoid(current, self.suspects)
            try:
                candidates = [bound_udp_socket(self.lab, req.src, 0) for _ in range(CANDIDATES)] if avoid else []
            except OSError as exc:  # a NIC without a route right now: try again on the next loss
                self.events.emit("dodge", workload=self.workload, flow=req.label, trigger=trigger, moved=False,
                                 error=str(exc))
                self.moves.put(Move(req.flow, None))
                continue
            plans.append(_Plan(req, current, trigger, avoid, because, candidates))
        found = iter(self.paths([(sock, plan.req.src, plan.req.dst) for plan in plans for sock in plan.candidates]))
        took = round(time.monotonic() - started, 3)
        for req, current, trigger, avoid, because, candidates in plans:
            chosen = pick(avoid, current, [next(found) for _ in candidates]) if avoid else None
            for number, sock in enumerate(candidates):
                if chosen is None or number != chosen[0]:
                    sock.close()
            fields = dict(workload=self.workload, flow=req.label, trigger=trigger,
                          from_sport=req.sock.getsockname()[1], from_path=list(current), avoid=sorted(avoid),
                          because=because, took_s=took)
            if chosen is None:
                self.events.emit("dodge", **fields, moved=False,
                                 reason="no source port with a better path" if avoid else "no switch-to-switch link")
                self.moves.put(Move(req.flow, None))
                continue
            sock, path = candidates[chosen[0]], chosen[1]
            self.events.emit("dodge", **fields, moved=True, to_sport=sock.getsockname()[1], to_path=list(path),
                             avoided=not (avoid & set(path)))
            self.moves.put(Move(req.flow, sock))

    def paths(self, traces: list[tuple[socket.socket, Nic, Nic]]) -> list[tuple[str | None, ...]]:
        """The links each (socket, src, dst)'s datagrams cross now, host link to host link; None
        for a hop that did not answer. All sockets are traced at once."""
        hops = [len(equal_cost_paths(self.fabric, src, dst)[0]) for _sock, src, dst in traces]
        socks = [sock for sock, _src, _dst in traces]
        answers: list[dict[int, str]] = [{} for _ in traces]
        for (sock, _src, dst), last in zip(traces, hops):
            report_errors(sock)
            for ttl in range(2, last + 1):
                payload = struct.pack("!HId", TRACE_FLOW, ttl, time.monotonic()).ljust(48, b"\0")
                send(sock, payload, (dst.address, self.dport), ttl)  # unsent: that hop stays unanswered
        deadline = time.monotonic() + ANSWER_WAIT_S
        while time.monotonic() < deadline and any(len(a) < last - 1 for a, last in zip(answers, hops)):
            time.sleep(0.005)
            self._collect(socks, answers)
        self._collect(socks, answers)
        for sock in socks:
            report_errors(sock, False)
            self._collect([sock], [{}])  # the queue is empty now, so the flow's next send is not eaten
        return [self.names.path(src.label, [a.get(ttl) for ttl in range(2, last + 1)], dst.label)
                for (_sock, src, dst), a, last in zip(traces, answers, hops)]

    @staticmethod
    def _collect(socks, answers) -> None:
        for sock, found in zip(socks, answers):
            for data, offender in time_exceeded(sock):
                flow, ttl = struct.unpack_from("!HI", data)
                if flow == TRACE_FLOW:
                    found[ttl] = offender
