"""Isolation: take a fabric link out of service by shutting its BGP session on both ends, as
production controllers drain a link a detector has localized. Neighbours withdraw the routes
over it at once (a clean withdraw, no timers), traffic moves to the other ECMP members, and the
link stays up for repair and testing. Each drain is kept in the lab's state until it is undone.
"""

from __future__ import annotations

import threading
import time

from twin.detect.verdicts import Verdict, names_fault
from twin.errors import TwinError
from twin.lab.handle import Lab
from twin.lab.routing.frr import configure_bgp
from twin.model.fabric import link_key
from twin.model.targets import resolve_link


class DrainError(TwinError):
    pass


def drain(lab: Lab, text: str) -> str:
    """Shut the link's BGP session on both ends; returns the link's name. Refuses a host link and
    a link whose switch would be left without a path toward that tier (a drain never partitions)."""
    lab.refuse_split("a drain (it shuts the session at both ends)")
    link, a, b = resolve_link(lab.fabric, text)
    key = link_key(link.name)
    nodes = lab.fabric.nodes
    if not (nodes[a].is_switch and nodes[b].is_switch):
        raise DrainError(f"{link.name} is a host link: draining it would cut the NIC off",
                         hint="drain a switch-to-switch link; take a host NIC down with a link_down fault")
    if key in lab.state.drains:
        raise DrainError(f"{link.name} is already drained", hint=f"undrain it: twin lab undrain {lab.state.lab} ...")
    for node, peer in ((a, b), (b, a)):
        left = [other for other in lab.fabric.links_of(node) if nodes[other.peer(node).node].role == nodes[peer].role
                and link_key(other.name) != key and link_key(other.name) not in lab.state.drains]
        if not left:
            raise DrainError(f"draining {link.name} would leave {node} without a {nodes[peer].role} link",
                             hint="undrain another of its links first")
    lab.state.drains.append(key)  # recorded first: a crash half-way is undone by undrain
    lab.state.save()
    for node in (a, b):
        configure_bgp(lab, nodes[node], f"neighbor {link.peer(node).address.ip} shutdown")
    return key


def undrain(lab: Lab, text: str) -> str:
    link, a, b = resolve_link(lab.fabric, text)
    key = link_key(link.name)
    if key not in lab.state.drains:
        raise DrainError(f"{link.name} is not drained",
                         hint=f"drained links: {', '.join(lab.state.drains) or 'none'}")
    for node in (a, b):
        configure_bgp(lab, lab.fabric.nodes[node],
                      f"no neighbor {link.peer(node).address.ip} shutdown")
    lab.state.drains.remove(key)
    lab.state.save()
    return key


class Isolator:
    """During a run: drain each switch-to-switch link the chosen detectors name (once), and
    undrain it when a fault it belongs to is cleared (the operator's repair), or at the end."""

    def __init__(self, lab: Lab, events, detectors: set[str]):
        self.lab, self.events, self.detectors = lab, events, detectors
        self._lock = threading.Lock()
        events.subscribe("verdict", self._verdict)

    def _verdict(self, record: dict) -> None:
        # a set verdict (links the probes cannot tell apart) drains nothing: draining every
        # candidate would take healthy links out of service on a guess
        link = record.get("link")
        if record.get("detector") not in self.detectors or not link or link_key(link) in self.lab.state.drains:
            return
        started = time.monotonic()
        with self._lock:
            try:
                key = drain(self.lab, link)
            except TwinError as exc:
                self.events.emit("isolate", op="refused", link=link, detector=record["detector"],
                                 reason=exc.message)
                return
        self.events.emit("isolate", op="drained", link=key, detector=record["detector"],
                         took_s=round(time.monotonic() - started, 3))

    def restore(self, targets: list[str] | None = None) -> None:
        """Undrain the drained links that name one of `targets` (None: every drained link)."""
        with self._lock:
            for key in list(self.lab.state.drains):
                if targets is None or names_fault(Verdict(t=0, detector="", link=key), targets):
                    undrain(self.lab, key)
                    self.events.emit("isolate", op="restored", link=key)
