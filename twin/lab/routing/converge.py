"""Convergence: every switch has the expected ECMP next hops toward every host prefix
(FRR's FIB view over vtysh JSON), and a real packet from every host NIC reaches every other."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from ipaddress import IPv4Network

from twin.errors import ConvergenceError, RuntimeBackendError
from twin.lab.handle import Lab
from twin.lab.kernel.fib import next_hop_counts
from twin.lab.reach import unreachable_pairs
from twin.lab.routing.frr import session_marks, vtysh_json, wait_established
from twin.lab.routing.frr_answers import bfd_counts, installed_next_hops
from twin.model.ecmp import expected_next_hops, prefix_leaves
from twin.model.nics import SAMPLE_PER_NIC, checked_pairs, fabric_nics, fabric_pairs
from twin.model.render import bgp_neighbors
from twin.progress import Progress

POLL_S = 0.25


@dataclass(frozen=True)
class RoutingGap:
    switch: str
    prefix: IPv4Network
    expected: int
    installed: int

    def __str__(self) -> str:
        return f"{self.switch}: {self.prefix} has {self.installed} of {self.expected} ECMP next hops"


def fib_next_hops(lab: Lab, switch: str) -> dict[IPv4Network, int]:
    """prefix -> number of next hops FRR has installed in the kernel FIB."""
    return installed_next_hops(vtysh_json(lab, switch, "show ip route json"))


def kernel_next_hops(lab: Lab, switch: str) -> dict[IPv4Network, int]:
    """prefix -> next hops of the kernel's route in the switch (what it forwards with; fib.py)."""
    with lab.enter(switch):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    with sock:
        return next_hop_counts(sock)


def wait_routes_of_neighbours(lab: Lab, switch: str, timeout_s: float = 10) -> bool:
    """Wait until the switch's kernel routes every host prefix its switch neighbours route (what
    they know is what it will learn from them, whatever else is down in the lab); False if it did
    not within `timeout_s`. A switch coming back opens its host ports after this, as dual-ToR
    switches hold theirs down after a reload until routing is up (Arista MLAG's reload-delay): a
    dual-port NIC sends into the port as soon as it has carrier."""
    # its own (a leaf's summaries: its kernel holds them as FRR's blackhole routes) it never learns
    prefixes = {prefix for prefix, leaves in prefix_leaves(lab.fabric).items() if switch not in leaves}
    neighbours = [peer["name"] for peer in bgp_neighbors(lab.fabric, lab.fabric.nodes[switch])]
    wanted = set().union(*(prefixes & set(kernel_next_hops(lab, peer)) for peer in neighbours))
    deadline = time.monotonic() + timeout_s
    while not wanted <= set(kernel_next_hops(lab, switch)):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S / 5)
    return True


def routing_gaps(lab: Lab, expected: dict[str, dict[IPv4Network, int]],
                 switches: list[str] | None = None) -> list[RoutingGap]:
    """The gaps of `switches` (default: all of them), in the kernel's routes."""
    def check(switch: str) -> list[RoutingGap]:
        have = kernel_next_hops(lab, switch)
        return [RoutingGap(switch, prefix, want, have.get(prefix, 0))
                for prefix, want in expected[switch].items() if have.get(prefix, 0) != want]

    return [gap for switch in sorted(switches or expected) for gap in check(switch)]


def bfd_gaps(lab: Lab, switches: list[str] | None = None) -> dict[str, tuple[int, int, int]]:
    """switch -> (BFD peers up, BFD sessions known, BGP neighbours) where not every neighbour is up,
    among `switches` (default: all)."""
    fabric = lab.fabric

    def check(switch: str):
        want = len(bgp_neighbors(fabric, fabric.nodes[switch]))
        try:
            peers = vtysh_json(lab, switch, "show bfd peers json")
        except RuntimeBackendError:
            peers = []
        return switch, (*bfd_counts(peers), want)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return {sw: counts for sw, counts in pool.map(check, switches or [n.name for n in fabric.local_switches])
                if counts[0] < counts[2]}


def wait_routing(lab: Lab, progress: Progress, deadline: float) -> None:
    """Every switch has the expected ECMP next hops toward every host prefix.

    Switch by switch: one with gaps is asked again, alone, until it has none, then the next. A
    round over every switch (208 route dumps at pod128) took 29 s while BGP kept the machine
    busy, and convergence went unseen for that long. Rounds repeat until one finds no gap
    anywhere (a switch may lose a route after it was checked)."""
    expected = expected_next_hops(lab.fabric)
    switches = sorted(s for s in expected if lab.fabric.runs_here(s))  # a split lab's share: its own
    progress.phase("BGP/ECMP convergence (switches)", len(switches))
    first_round = True
    while True:
        waited = False
        for number, switch in enumerate(switches):
            while gaps := routing_gaps(lab, expected, [switch]):
                waited = True
                if time.monotonic() > deadline:
                    raise ConvergenceError(
                        f"routing did not converge in time; {switch} has {len(gaps)} gaps, e.g. "
                        + "; ".join(str(g) for g in gaps[:3])
                        + (f" ({len(switches) - number - 1} switches not checked yet)" if first_round else ""),
                        hint="check `twin lab status` and the switch's frr.log; raise --timeout on a slow machine")
                time.sleep(POLL_S)
            if first_round:
                progress.advance()
        if not waited:
            return
        first_round = False


def wait_sessions(lab: Lab, progress: Progress, deadline: float, heard: bool = False) -> None:
    """Every fabric BGP session is Established. Checked before the routes: a session cleared a
    moment after it was shut is not up yet while the kernel still holds the routes it withdrew.

    `heard`: also until every session has read a message from its peer since this call. A session
    that lost its keepalives to a fault stays Established after the fault is cleared, and TCP's
    retransmission backoff can hold its next keepalive past the hold time: BGP's packets dropped
    on one rail4 link for 1.9-2.7 s, the session reset 0.3-1.0 s after the clear, when the lab had
    already looked converged. One message read restarts the hold timer."""
    progress.phase("BGP sessions established", None)
    sessions = {n.name: [peer["address"] for peer in bgp_neighbors(lab.fabric, n)] for n in lab.fabric.local_switches}
    try:
        marks = session_marks(lab, sessions) if heard else None
        wait_established(lab, sessions, deadline, heard_since=marks)
    except RuntimeBackendError as exc:
        raise ConvergenceError(exc.message, hint=exc.hint) from None


def wait_bfd(lab: Lab, progress: Progress, deadline: float) -> None:
    """Every BGP session has its BFD peer up (BGP can be Established while BFD is not)."""
    sessions = sum(len(bgp_neighbors(lab.fabric, n)) for n in lab.fabric.local_switches)
    progress.phase("BFD sessions up", sessions)
    done, open_switches = 0, None
    while True:
        gaps = bfd_gaps(lab, open_switches)
        if not gaps and open_switches is not None:
            open_switches = None  # one confirming round over every switch
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


def wait_reachable(lab: Lab, progress: Progress, deadline: float, all_pairs: bool = False) -> None:
    """A real packet from every host NIC reaches the NICs of other hosts: every pair with
    `all_pairs`, else the sample of model/nics.sample_pairs (the same on small labs)."""
    nics = fabric_nics(lab.fabric)
    pairs = [pair for pair in checked_pairs(nics, all_pairs) if lab.fabric.runs_here(nics[pair[0]].host)]
    progress.phase("all-pairs reachability" if len(pairs) == len(fabric_pairs(nics))
                   else f"reachability ({len(pairs)} NIC pairs, {SAMPLE_PER_NIC} from each NIC)", len(pairs))
    while True:
        failed = unreachable_pairs(lab, timeout_s=min(2.0, max(0.5, deadline - time.monotonic())), pairs=pairs)
        if not failed:
            progress.advance(len(pairs))
            return
        if time.monotonic() > deadline:
            raise ConvergenceError(
                f"{len(failed)} of {len(pairs)} host NIC pairs cannot reach each other, e.g. "
                + "; ".join(f"{s} -> {d}" for s, d in failed[:3]),
                hint="inspect with `twin lab exec LAB HOST -- ip route get ...`")
