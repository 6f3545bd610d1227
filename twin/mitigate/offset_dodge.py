"""Hash dodging by path offset (`dodge: offset`, on a lab with routing.hash_offset): Tencent
Xingmai's deterministic dodging. The switches add the low byte of a flow's source port to their
hash (model/pathhash.py), so a sender knows its flow's path without tracing it, and knows which
offset takes it off the links to avoid: with two or more members per ECMP group, the next offset
shares no spine or superspine with the current one. A flow that loses packets, or whose path
crosses a link a detector named, moves at once to the first offset whose path avoids those links
(the next one, unless a failure narrowed a group); nothing is traced, so a move costs a socket.

Same interface, verdicts and events as the tracing dodger (dodge.py), which it specialises.
"""

from __future__ import annotations

import socket
import time
from ipaddress import ip_address

from twin.lab.traffic import bound_udp_socket
from twin.mitigate.dodge import Dodger, Move, Request, links_to_avoid
from twin.model import pathhash
from twin.model.nics import Nic


class OffsetDodger(Dodger):
    def __init__(self, lab, events, workload: str, dport: int):
        super().__init__(lab, events, workload, dport)
        self.model = pathhash.Paths(lab.fabric)
        self.link_of = {(end.node, end.ifname): link.name for link in lab.fabric.links for end in (link.a, link.b)}

    def path_of(self, src: Nic, dst: Nic, sport: int) -> tuple[str, ...]:
        """The links a flow's packets cross, host link to host link, from the model."""
        hops = self.model.path(ip_address(src.address), ip_address(dst.address), pathhash.PROTOCOLS["udp"], sport,
                               self.dport)
        return tuple(self.link_of[(hop.egress.node, hop.egress.ifname)] for hop in hops if hop.egress)

    def paths(self, traces: list[tuple[socket.socket, Nic, Nic]]) -> list[tuple[str | None, ...]]:
        return [self.path_of(src, dst, sock.getsockname()[1]) for sock, src, dst in traces]

    def _move(self, flows: list[tuple[Request, tuple, str]]) -> None:
        for req, current, trigger in flows:
            started = time.monotonic()
            avoid, because = links_to_avoid(current, self.suspects)
            sport = req.sock.getsockname()[1]
            fields = dict(workload=self.workload, flow=req.label, trigger=trigger, from_sport=sport,
                          from_path=list(current), avoid=sorted(avoid), because=because)
            moved = None
            for step in range(1, pathhash.OFFSET_MASK + 1) if avoid else ():
                candidate = pathhash.with_offset(sport, (sport + step) & pathhash.OFFSET_MASK)
                path = self.path_of(req.src, req.dst, candidate)
                if avoid & set(path):
                    continue
                try:
                    moved = (bound_udp_socket(self.lab, req.src, candidate), path, step)
                    break
                except OSError:  # that port is taken on this host: the next offset that avoids them
                    continue
            if moved is None:
                self.events.emit("dodge", **fields, moved=False, took_s=round(time.monotonic() - started, 3),
                                 reason="no offset with a better path" if avoid else "no switch-to-switch link")
                self.moves.put(Move(req.flow, None))
                continue
            sock, path, step = moved
            self.events.emit("dodge", **fields, moved=True, to_sport=sock.getsockname()[1], to_path=list(path),
                             avoided=True, offset_step=step, took_s=round(time.monotonic() - started, 3))
            self.moves.put(Move(req.flow, sock))
