"""Convergence: every switch has the expected ECMP next hops toward every host prefix
(FRR's FIB view over vtysh JSON), and a real packet from every host NIC reaches every other."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from ipaddress import IPv4Network

from twin.model.ecmp import expected_next_hops
from twin.errors import ConvergenceError, RuntimeBackendError
from twin.lab.fib import next_hop_counts
from twin.lab.frr import vtysh_json
from twin.model.render import bgp_neighbors
from twin.model.fabric import Fabric
from twin.progress import Progress
from twin.lab.reach import fabric_nics, fabric_pairs, unreachable_pairs
from twin.lab.handle import Lab
from twin.lab.runtime import Runtime
from twin.lab.state import LabState

POLL_S = 0.25


@dataclass(frozen=True)
class RoutingGap:
    switch: str
    prefix: IPv4Network
    expected: int
    installed: int

    def __str__(self) -> str:
        return f"{self.switch}: {self.prefix} has {self.installed} of {self.expected} ECMP next hops"


def fib_next_hops(runtime: Runtime, state: LabState, switch: str) -> dict[IPv4Network, int]:
    """prefix -> number of next hops FRR has installed in the kernel FIB."""
    routes = vtysh_json(runtime, state, switch, "show ip route json")
    installed = {}
    for prefix, entries in routes.items():
        for entry in entries:
            if entry.get("selected") and entry.get("installed"):
                installed[IPv4Network(prefix)] = sum(1 for hop in entry.get("nexthops", []) if hop.get("fib"))
    return installed


def kernel_next_hops(lab: Lab, switch: str) -> dict[IPv4Network, int]:
    """prefix -> next hops of the kernel's route in the switch (what it forwards with; fib.py)."""
    with lab.enter(switch):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    with sock:
        return next_hop_counts(sock)


def routing_gaps(lab: Lab, expected: dict[str, dict[IPv4Network, int]],
                 switches: list[str] | None = None) -> list[RoutingGap]:
    """The gaps of `switches` (default: all of them), in the kernel's routes."""
    def check(switch: str) -> list[RoutingGap]:
        have = kernel_next_hops(lab, switch)
        return [RoutingGap(switch, prefix, want, have.get(prefix, 0))
                for prefix, want in expected[switch].items() if have.get(prefix, 0) != want]

    return [gap for switch in sorted(switches or expected) for gap in check(switch)]


def bfd_gaps(runtime: Runtime, state: LabState, fabric: Fabric,
             switches: list[str] | None = None) -> dict[str, tuple[int, int, int]]:
    """switch -> (BFD peers up, BFD sessions known, BGP neighbours) where not every neighbour is up,
    among `switches` (default: all)."""
    def check(switch: str):
        want = len(bgp_neighbors(fabric, fabric.nodes[switch]))
        try:
            peers = vtysh_json(runtime, state, switch, "show bfd peers json") or []
        except RuntimeBackendError:
            peers = []
        up = sum(1 for p in peers if p.get("status") == "up")
        return switch, (up, len(peers), want)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return {sw: counts for sw, counts in pool.map(check, switches or [n.name for n in fabric.switches])
                if counts[0] < counts[2]}


def wait_routing(lab: Lab, progress: Progress, deadline: float) -> None:
    """Every switch has the expected ECMP next hops toward every host prefix.

    Each round asks only the switches that still had gaps (a vtysh per switch and a route table of
    JSON each: asking all 208 of pod128 every round took more CPU than BGP had), then one round over
    all of them confirms that none lost a route meanwhile."""
    expected = expected_next_hops(lab.fabric)
    total = sum(len(v) for v in expected.values())
    progress.phase("BGP/ECMP convergence", total)
    done, open_switches = 0, None
    while True:
        gaps = routing_gaps(lab, expected, open_switches)
        if not gaps and open_switches is not None:
            open_switches = None  # the confirming round
            continue
        open_switches = sorted({gap.switch for gap in gaps})
        progress.advance(total - len(gaps) - done)
        done = total - len(gaps)
        if not gaps:
            return
        if time.monotonic() > deadline:
            raise ConvergenceError(
                f"routing did not converge in time; {len(gaps)} gaps, e.g. "
                + "; ".join(str(g) for g in gaps[:3]),
                hint="check `twin lab status` and the switch's frr.log; raise --timeout on a slow machine")
        time.sleep(POLL_S)


def wait_bfd(lab: Lab, progress: Progress, deadline: float) -> None:
    """Every BGP session has its BFD peer up (BGP can be Established while BFD is not)."""
    sessions = sum(len(bgp_neighbors(lab.fabric, n)) for n in lab.fabric.switches)
    progress.phase("BFD sessions up", sessions)
    done, open_switches = 0, None
    while True:
        gaps = bfd_gaps(lab.runtime, lab.state, lab.fabric, open_switches)
        if not gaps and open_switches is not None:
            open_switches = None  # as wait_routing: one confirming round over every switch
            continue
        open_switches = sorted(gaps)
        missing = sum(want - up for up, _known, want in gaps.values())
        progress.advance(sessions - missing - done)
        done = sessions - missing
        if not gaps:
            return
        if time.monotonic() > deadline:
            raise ConvergenceError(
                "BFD did not come up in time: "
                + "; ".join(f"{sw} {up}/{want} up ({known} sessions known)"
                            for sw, (up, known, want) in list(gaps.items())[:3]),
                hint="check `twin lab status` and the switch's frr.log")
        time.sleep(POLL_S)


def wait_reachable(lab: Lab, progress: Progress, deadline: float) -> None:
    """A real packet from every host NIC reaches every NIC of every other host."""
    pairs = len(fabric_pairs(fabric_nics(lab.fabric)))
    progress.phase("all-pairs reachability", pairs)
    while True:
        failed = unreachable_pairs(lab, timeout_s=min(2.0, max(0.5, deadline - time.monotonic())))
        if not failed:
            progress.advance(pairs)
            return
        if time.monotonic() > deadline:
            raise ConvergenceError(
                f"{len(failed)} of {pairs} host NIC pairs cannot reach each other, e.g. "
                + "; ".join(f"{s} -> {d}" for s, d in failed[:3]),
                hint="inspect with `twin lab exec LAB HOST -- ip route get ...`")
