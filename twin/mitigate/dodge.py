"""Hash dodging (end-host rerouting). ECMP hashes the 5-tuple, so a flow's source port chooses
its path: when a flow loses packets, its sender learns the flow's path (TTL-limited datagrams
from the flow's own socket), decides which links to avoid (the links detectors have named on
that path, else every switch-to-switch link of it), then opens fresh source ports, learns each
one's path the same way, and moves the flow to the first whose path avoids them. Routing never
has to react; this is what operators do against a silent drop until the link is repaired.
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time
from dataclasses import dataclass

from ..detect.verdicts import link_key
from ..probes.mesh import PathNames
from ..probes.plan import equal_cost_paths
from ..probes.trace import report_errors, send, time_exceeded
from ..reach import Nic
from ..traffic import bound_udp_socket

TRACE_FLOW = 0xFFFF  # flow id in trace datagrams (they expire before the receiver anyway)
CANDIDATES = 8  # fresh source ports tried per move: with 2 paths, P(none avoids) = 1/256
ANSWER_WAIT_S = 0.3


@dataclass
class Request:
    flow: int
    label: str
    src: Nic
    dst: Nic
    sock: socket.socket


def links_to_avoid(path: tuple[str | None, ...], suspects: set[str]) -> tuple[set[str], str]:
    """The links of `path` detectors have named; if none, every switch-to-switch link of it
    (the host links at both ends cannot be avoided)."""
    named = {link for link in path if link and link_key(link) in suspects}
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
    """Runs beside a flows workload: `request()` when a flow lost packets; moves come back
    through `moves` as (flow, new socket) for the sending thread to adopt."""

    def __init__(self, runtime, fabric, events, workload: str, dport: int):
        self.runtime, self.fabric, self.events, self.workload, self.dport = runtime, fabric, events, workload, dport
        self.names = PathNames(fabric)
        self.switch_links = {node: {link_key(l) for l in links} for node, links in fabric.switch_links().items()}
        self.suspects: set[str] = set()
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
            _flow, sock = self.moves.get()
            if sock is not None:
                sock.close()

    def request(self, req: Request) -> None:
        self._requests.put(req)

    def _verdict(self, record: dict) -> None:
        if record.get("link"):
            self.suspects.add(link_key(record["link"]))
        elif record.get("node") in self.switch_links:
            self.suspects |= self.switch_links[record["node"]]

    def _run(self) -> None:
        while (req := self._requests.get()) is not None:
            try:
                self._dodge(req)
            except OSError as exc:  # a NIC without a route right now: try again on the next loss
                self.events.emit("dodge", workload=self.workload, flow=req.label, moved=False, error=str(exc))
                self.moves.put((req.flow, None))

    def _dodge(self, req: Request) -> None:
        started = time.monotonic()
        hops = len(equal_cost_paths(self.fabric, req.src, req.dst)[0])
        current = self.paths([req.sock], req.src, req.dst, hops)[0]
        avoid, because = links_to_avoid(current, self.suspects)
        fields = dict(workload=self.workload, flow=req.label, from_sport=req.sock.getsockname()[1],
                      from_path=list(current), avoid=sorted(avoid), because=because)
        candidates = [bound_udp_socket(self.runtime, req.src, 0) for _ in range(CANDIDATES)] if avoid else []
        chosen = pick(avoid, current, self.paths(candidates, req.src, req.dst, hops)) if avoid else None
        for number, sock in enumerate(candidates):
            if chosen is None or number != chosen[0]:
                sock.close()
        took = round(time.monotonic() - started, 3)
        if chosen is None:
            self.events.emit("dodge", **fields, moved=False, took_s=took,
                             reason="no source port with a better path" if avoid else "no switch-to-switch link")
            self.moves.put((req.flow, None))
            return
        sock, path = candidates[chosen[0]], chosen[1]
        self.events.emit("dodge", **fields, moved=True, to_sport=sock.getsockname()[1], to_path=list(path),
                         avoided=not (avoid & set(path)), took_s=took)
        self.moves.put((req.flow, sock))

    def paths(self, socks: list[socket.socket], src: Nic, dst: Nic, hops: int) -> list[tuple[str | None, ...]]:
        """The links each socket's datagrams to `dst` cross now, host link to host link; None for
        a hop that did not answer."""
        answers: list[dict[int, str]] = [{} for _ in socks]
        for sock in socks:
            report_errors(sock)
            for ttl in range(2, hops + 1):
                payload = struct.pack("!HId", TRACE_FLOW, ttl, time.monotonic()).ljust(48, b"\0")
                send(sock, payload, (dst.address, self.dport), ttl)  # unsent: that hop stays unanswered
        deadline = time.monotonic() + ANSWER_WAIT_S
        while time.monotonic() < deadline and any(len(a) < hops - 1 for a in answers):
            time.sleep(0.005)
            self._collect(socks, answers)
        self._collect(socks, answers)
        for sock in socks:
            report_errors(sock, False)
            self._collect([sock], [{}])  # the queue is empty now, so the flow's next send is not eaten
        return [self.names.path(src.label, [a.get(ttl) for ttl in range(2, hops + 1)], dst.label) for a in answers]

    @staticmethod
    def _collect(socks, answers) -> None:
        for sock, found in zip(socks, answers):
            for data, offender in time_exceeded(sock):
                flow, ttl = struct.unpack_from("!HI", data)
                if flow == TRACE_FLOW:
                    found[ttl] = offender
