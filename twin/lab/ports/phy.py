"""The ports' physical layer: what a cable, an optic, a port's MAC or a switch's forwarding chip
does to the frames a port carries (ebpf/phy.bpf.c), the same two programs on every fabric port of
every lab, healthy or not (`receive` on its ingress, `transmit` on its egress).

Faults that real hardware hides are written into the programs' maps and nowhere else: a silent
drop or bit errors into the receiving port's element of `phy_faults`, a switch's black hole into
`phy_blackholes`, two swapped cables into `phy_partners`. A trainee listing a node's nft tables,
qdiscs, filters or programs sees a healthy lab (issue 36). What real hardware shows, the program
counts: the frames that failed the frame check (`rx_crc_errors`, as `ethtool -S` would show). A
silent drop counts only in a column kept for grading (`dropped`), never shown to a trainee, as a
dying optic counts nothing.

The object is loaded once per lab at `twin lab up` and closed; the tc filters hold the program and
the program its maps, until the lab's namespaces go: nothing is pinned. Other processes (a fault's
apply, a counter reader) open the maps by the ids recorded in `<lab dir>/phy.json`, checked by name.
"""

from __future__ import annotations

import errno
import json
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import IPv4Network
from pathlib import Path

from twin.errors import TwinError
from twin.lab.ebpf import layout
from twin.lab.ebpf.libbpf import BpfObject, delete, lookup, lookup_array, map_by_id, map_id, next_key, update
from twin.lab.handle import Lab
from twin.lab.kernel import nlbatch
from twin.lab.kernel.nsutil import interface_indexes
from twin.lab.pfc.queues import CLSACT_EGRESS, CLSACT_INGRESS, netns_cookie
from twin.lab.state import locked
from twin.model.ports import Port, ports

OBJECT = Path(__file__).resolve().parents[1] / "ebpf" / "phy.bpf.o"
IDS_FILE = "phy.json"
MAPS = ("phy_ports", "phy_faults", "phy_counts", "phy_blackholes", "phy_settings", "phy_partners")
SIZED = ("phy_ports", "phy_faults", "phy_counts")  # one element per port
# `receive` after the queue programs' `dequeue` on the ingress (the kernel gives a filter without a
# priority 49152: a frame that crossed the wire has left the far queue, whatever becomes of it
# here); `transmit` before everything on the egress (a frame leaving by a swapped cable must be
# counted on the queue of the port it really leaves by).
HOOKS = {CLSACT_INGRESS: ("receive", 0xE000), CLSACT_EGRESS: ("transmit", 1)}  # program, priority
FILTER_NAME = "phy"  # what `tc filter show` calls it, on every port alike

# struct phy_fault, struct phy_counts (phy.h); tests/unit/test_bpf_layout.py checks them
FAULT = struct.Struct("<IIIIII")
FAULT_FIELDS = ("drop", "drop_flows", "flow_seed", "corrupt", "corrupt_min", "attenuation")
COUNTS = struct.Struct("<QQ")
COUNT_FIELDS = ("crc_errors", "dropped")
BLACKHOLE_KEY = struct.Struct("<IQ4s")  # struct blackhole_key: prefixlen (64 + the prefix's), netns, daddr
SETTINGS = struct.Struct("<IIII")  # struct phy_settings: blackholes, faulty_ports, crossed_ports, spare
ONE = 1_000_000  # PHY_ONE: shares in parts per million
HEALTHY = dict.fromkeys(FAULT_FIELDS, 0)


def ppm(percent: float) -> int:
    return round(percent * ONE / 100)


def indexes(lab: Lab) -> dict[Port, int]:
    """Every fabric port's element in the maps, from the model: the same in every process."""
    return {port: i for i, port in enumerate(p for p in ports(lab.fabric) if lab.fabric.runs_here(p.node))}


def attach(lab: Lab) -> None:
    """Load the programs, tell them every port and attach them to every port (`receive` on its
    ingress, `transmit` on its egress, once per node on the shared blocks its ports' clsact qdiscs
    name, nlbatch.SHARED_BLOCKS; a clsact qdisc is added where the queue programs put none: a
    lossy lab's ports, hosts' NICs). Records the maps' ids for other processes."""
    table = indexes(lab)
    bpf = BpfObject(OBJECT, max_entries=dict.fromkeys(SIZED, len(table)))
    try:
        ports_fd = bpf.map_fd("phy_ports")
        programs = {hook: bpf.program_fd(name) for hook, (name, _priority) in HOOKS.items()}
        (lab.paths.root / IDS_FILE).write_text(json.dumps({name: map_id(bpf.map_fd(name)) for name in MAPS}))
        by_node: dict[str, list[str]] = {}
        for port in table:
            by_node.setdefault(port.node, []).append(port.ifname)
        for node, ifnames in sorted(by_node.items()):
            netns = lab.netns(node)
            index = interface_indexes(netns)
            cookie = node_cookie(lab, node)
            for ifname in ifnames:  # before the program sees a packet
                update(ports_fd, layout.port_key(cookie, index[ifname]), struct.pack("<I", table[Port(node, ifname)]))
            with nlbatch.Sender(netns, node) as sender:
                for ifname in sorted(ifnames):
                    sender.add(nlbatch.clsact(), index[ifname], f"clsact on {ifname}", frozenset({errno.EEXIST}))
                for hook, fd in programs.items():  # once: the node's ports share the hook's block
                    program, priority = HOOKS[hook]
                    sender.add_node_program(hook, FILTER_NAME, fd, f"physical layer ({program}) on {node}'s ports",
                                            priority)
                sender.flush()
    finally:
        bpf.close()  # the filters hold the program, the program its maps


def _open(lab: Lab, name: str) -> int:
    """A descriptor of one of the lab's maps (the caller closes it)."""
    try:
        ids = json.loads((lab.paths.root / IDS_FILE).read_text())
    except FileNotFoundError:
        raise TwinError(f"lab {lab.state.lab} has no physical layer recorded ({IDS_FILE})",
                        hint="it was brought up by an older twin: `twin lab down` it and up again") from None
    return map_by_id(ids[name], name)


@contextmanager
def _maps(lab: Lab, *names: str) -> Iterator[list[int]]:
    fds = []
    try:
        for name in names:
            fds.append(_open(lab, name))
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


def _read_fault(fd: int, index: int) -> dict[str, int]:
    raw = lookup(fd, struct.pack("<I", index), FAULT.size)
    return dict(zip(FAULT_FIELDS, FAULT.unpack(raw), strict=True)) if raw else dict(HEALTHY)


def change(lab: Lab, port: Port, **fields: int) -> dict[str, int]:
    """Set some fields of a port's fault element; returns what they were (for the clear). Under the
    lab's lock: two faults on one port (a drop and bit errors) each change their own fields."""
    index = indexes(lab)[port]
    with locked(lab.paths.root), _maps(lab, "phy_faults") as (fd,):
        current = _read_fault(fd, index)
        prior = {name: current[name] for name in fields}
        update(fd, struct.pack("<I", index), FAULT.pack(*(current | fields).values()))
        _recount(lab)
    return prior


def _recount(lab: Lab) -> None:
    """Count what is wrong in the lab into `phy_settings` (the programs' first read): counted from
    the maps after every change, under the lab's lock, so the count never drifts from them."""
    with _maps(lab, "phy_faults", "phy_blackholes", "phy_partners", "phy_settings") as (faults_fd, holes, partners,
                                                                                      settings):
        faulty = sum(1 for index in indexes(lab).values()
                     if (fault := _read_fault(faults_fd, index))["drop"] or fault["corrupt"])
        crossed = len(_keys(partners, layout.PORT_KEY.size))
        update(settings, struct.pack("<I", 0), SETTINGS.pack(len(_keys(holes, BLACKHOLE_KEY.size)), faulty, crossed, 0))


def node_cookie(lab: Lab, node: str) -> int:
    return netns_cookie(lab.netns(node))


def _hole_key(cookie: int, prefix: IPv4Network) -> bytes:
    return BLACKHOLE_KEY.pack(64 + prefix.prefixlen, cookie, prefix.network_address.packed)


def add_blackhole(lab: Lab, node: str, prefix: str) -> None:
    """The switch's forwarding chip discards what it would forward toward `prefix`."""
    key = _hole_key(node_cookie(lab, node), IPv4Network(prefix))
    with locked(lab.paths.root), _maps(lab, "phy_blackholes") as (holes,):
        if key not in _keys(holes, BLACKHOLE_KEY.size):
            update(holes, key, struct.pack("<Q", 0))
        _recount(lab)


def remove_blackhole(lab: Lab, node: str, prefix: str) -> None:
    key = _hole_key(node_cookie(lab, node), IPv4Network(prefix))
    with locked(lab.paths.root), _maps(lab, "phy_blackholes") as (holes,):
        delete(holes, key)
        _recount(lab)


def _keys(fd: int, size: int) -> list[bytes]:
    """Every key of a hash map or trie (a lookup in a trie answers the longest prefix that matches,
    so whether it holds this very prefix is a question for its keys)."""
    found, key = [], None
    while (key := next_key(fd, key, size)) is not None:
        found.append(key)
    return found


def blackholes(lab: Lab) -> dict[str, list[str]]:
    """node -> the prefixes its forwarding chip discards (the restoration snapshot's view)."""
    cookies = {node_cookie(lab, node.name): node.name for node in lab.fabric.local_switches}
    with _maps(lab, "phy_blackholes") as (holes,):
        found: dict[str, list[str]] = {}
        for key in _keys(holes, BLACKHOLE_KEY.size):
            length, cookie, daddr = BLACKHOLE_KEY.unpack(key)
            if cookie in cookies:
                found.setdefault(cookies[cookie], []).append(str(IPv4Network((daddr, length - 64))))
        return {node: sorted(prefixes) for node, prefixes in found.items()}


def cross(lab: Lab, node: str, ifnames: list[str]) -> None:
    """Swap the cables of two of a node's ports (faults/miswire.py)."""
    cookie, index = node_cookie(lab, node), interface_indexes(lab.netns(node))
    a, b = (index[name] for name in ifnames)
    with locked(lab.paths.root), _maps(lab, "phy_partners") as (partners,):
        update(partners, layout.port_key(cookie, a), struct.pack("<I", b))
        update(partners, layout.port_key(cookie, b), struct.pack("<I", a))
        _recount(lab)


def uncross(lab: Lab, node: str, ifnames: list[str]) -> None:
    cookie, index = node_cookie(lab, node), interface_indexes(lab.netns(node))
    with locked(lab.paths.root), _maps(lab, "phy_partners") as (partners,):
        for name in ifnames:
            delete(partners, layout.port_key(cookie, index[name]))
        _recount(lab)


def crossed(lab: Lab) -> dict[str, list[str]]:
    """node -> its ports whose cables are swapped (the restoration snapshot's view)."""
    cookies = {node_cookie(lab, name): name for name in lab.fabric.nodes if lab.fabric.runs_here(name)}
    names: dict[str, dict[int, str]] = {}
    found: dict[str, list[str]] = {}
    with _maps(lab, "phy_partners") as (partners,):
        for key in _keys(partners, layout.PORT_KEY.size):
            cookie, ifindex, _spare = layout.PORT_KEY.unpack(key)
            if cookie in cookies:
                node = cookies[cookie]
                if node not in names:
                    names[node] = {i: n for n, i in interface_indexes(lab.netns(node)).items()}
                found.setdefault(node, []).append(names[node].get(ifindex, str(ifindex)))
    return {node: sorted(ports) for node, ports in found.items()}


def faults(lab: Lab) -> dict[Port, dict[str, int]]:
    """The ports whose receive side is not healthy, and how (the restoration snapshot's view)."""
    with _maps(lab, "phy_faults") as (fd,):
        return {port: fault for port, index in indexes(lab).items()
                if (fault := _read_fault(fd, index)) != HEALTHY}


class CountReader:
    """Every port's receive-side counters, the map kept open between reads (a telemetry sampler
    reads it ten times a second). A lab brought up without the physical layer reads as none."""

    def __init__(self, lab: Lab):
        self.lab, self.indexes = lab, indexes(lab)
        self._fd: int | None = None

    def read(self) -> dict[Port, dict[str, int]]:
        if self._fd is None:
            try:
                self._fd = _open(self.lab, "phy_counts")
            except TwinError:
                return {}
        values = lookup_array(self._fd, max(self.indexes.values(), default=-1) + 1, COUNTS.size)
        return {port: dict(zip(COUNT_FIELDS, COUNTS.unpack(values[index]), strict=True))
                for port, index in self.indexes.items() if index < len(values)}

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def counts(lab: Lab) -> dict[Port, dict[str, int]]:
    """Every port's receive-side counters, read once."""
    reader = CountReader(lab)
    try:
        return reader.read()
    finally:
        reader.close()
