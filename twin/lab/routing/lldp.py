"""LLDP on every node (Debian's lldpd), as every switch and server of the fabrics we twin runs it:
each port announces its node and port name once a second (a big lab less often: tx_interval_s),
so each switch port knows who is cabled to it, and config-audit (detect/config_audit.py) compares
that with the lab.

One lldpd per node, started from the host inside the node's network namespace (any runtime; a
container image needs no lldpd), listening on the node's fabric ports only (-I), its control
socket and log in the node's directory (lldp/), recorded by pid like FRR's daemons. lldpd forks an
unprivileged child that dies with it. Hosts only send (`tx-only`): a NIC's frames are the
evidence the leaves need, and a miswire's swapped cables (faults/miswire.py, lab/ports/phy.py) move frames after
a packet socket on the host has already seen them.

Measured at rest (this VM, 2026-11-28): two processes of about 6.8 and 2.7 MB resident per node,
no CPU tick in 20 s with one frame per port a second on mini; pod128's 4,608 ports took 0.37 of a
core at that rate (2026-12-03), its unprivileged children doing the work.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from twin.errors import MissingDependencyError, RuntimeBackendError
from twin.lab.handle import Lab
from twin.lab.state import Resource
from twin.model.fabric import Fabric, Node
from twin.procs import alive, working_dir
from twin.units import period_within

LLDPD, LLDPCLI = "lldpd", "lldpcli"
RESOURCE_KIND = "lldp"
# Every port announces itself each tx interval: the shortest (lldpd's 1 s, so config-audit hears a
# miswire within a second) that keeps the lab's LLDP within LLDP_CORES at rest, at most IEEE
# 802.1AB's default of 30 s. Its cost per port and frame (sent, received and decoded), measured on
# pod128 at rest with `lldpcli configure lldp tx-interval` 1, 2, 5 and 10 s (2026-12-03: 0.37, 0.15,
# 0.065 and 0.04 of a core over 4,608 ports): 80 us. pod128 then announces every 4 s, AIPod every 17 s.
MIN_TX_INTERVAL_S, MAX_TX_INTERVAL_S = 1, 30
CPU_S_PER_PORT_FRAME = 80e-6
LLDP_CORES = 0.1
SPAWN_WORKERS = 8
LIBRARY = "liblldpctl.so.4"
# lldpctl_key_t (lldpctl.h; numbered in blocks that the library's ABI keeps)
K_INTERFACE_NAME, K_PORT_NEIGHBORS, K_PORT_AGE, K_PORT_ID, K_PORT_CHASSIS, K_CHASSIS_NAME = \
    1000, 1200, 1202, 1204, 1208, 1803


@dataclass(frozen=True)
class Neighbor:
    """What a port hears: the node and port name announced at the other end of its cable."""
    node: str
    port: str


def check_installed() -> None:
    if shutil.which(LLDPD) is None or shutil.which(LLDPCLI) is None:
        raise MissingDependencyError("lldpd is not installed (the lab's `lldp: true` runs it on every node)",
                                     hint="run `make deps` (installs Debian's lldpd), or set `lldp: false` "
                                          "in the lab file")


def directory(lab: Lab, node: str) -> Path:
    """Its own folder in the node's: FRR's setup hands the node's files to the frr user, and lldpcli
    (set-uid _lldpd) must still reach the socket lldpd gave it."""
    return lab.state.node_dir(node) / "lldp"


def socket_path(lab: Lab, node: str) -> Path:
    return directory(lab, node) / "lldpd.socket"


def tx_interval_s(fabric: Fabric) -> int:
    """Seconds between two frames of a port (the module's constants say how it is chosen)."""
    ports = sum(len(fabric.links_of(node.name)) for node in fabric.local_nodes)
    needed = int(period_within(ports * CPU_S_PER_PORT_FRAME, LLDP_CORES))
    return min(MAX_TX_INTERVAL_S, max(MIN_TX_INTERVAL_S, needed))


def config(node: Node, interval_s: int) -> str:
    lines = [f"configure system hostname {node.name}",
             f"configure system description \"fabric-twin {node.role}\"",
             "configure lldp portidsubtype ifname",
             f"configure lldp tx-interval {interval_s}"]
    if node.role == "host":
        lines.append("configure lldp status tx-only")
    return "\n".join(lines) + "\n"


def argv(fabric: Fabric, node: Node, folder: Path) -> list[str]:
    ports = sorted(link.endpoint(node.name).ifname for link in fabric.links_of(node.name))
    return [LLDPD, "-d", "-u", str(folder / "lldpd.socket"), "-O", str(folder / "lldpd.conf"),
            "-I", ",".join(ports)]


def start(lab: Lab, on_started: Callable[[], None] = lambda: None) -> None:
    """lldpd on every node, in parallel; every one recorded in the state file before it starts."""
    state, fabric = lab.state, lab.fabric
    nodes = [node for node in fabric.local_nodes if fabric.links_of(node.name)]
    resources = [Resource(kind=RESOURCE_KIND, name=f"{node.name}/lldpd", node=node.name) for node in nodes]
    state.resources.extend(resources)
    state.save()
    interval_s = tx_interval_s(fabric)

    def spawn(pair: tuple[Node, Resource]) -> None:
        node, resource = pair
        folder = directory(lab, node.name)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "lldpd.conf").write_text(config(node, interval_s))
        with open(folder / "lldpd.log", "ab") as log:
            netns = lab.runtime.netns_path(node.name)
            proc = subprocess.Popen(["nsenter", f"--net={netns}", *argv(fabric, node, folder)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                    cwd=folder)
        # nsenter execs lldpd: the pid is lldpd's monitor, which overwrites its command line; its
        # working directory (the node's) is what marks it as this lab's at teardown
        resource.pid = proc.pid
        on_started()

    try:
        with ThreadPoolExecutor(max_workers=SPAWN_WORKERS) as pool:
            list(pool.map(spawn, zip(nodes, resources, strict=True)))
    finally:
        state.save()


def health(lab: Lab, node: str) -> dict[str, bool]:
    """{"lldpd": running} for a node that runs one (judged as teardown judges it: the recorded pid is
    alive and works in the node's LLDP folder), {} for one that does not."""
    marker = str(directory(lab, node))
    recorded = next((r for r in lab.state.resources if r.kind == RESOURCE_KIND and r.node == node), None)
    if recorded is None:
        return {}
    return {"lldpd": bool(recorded.pid) and alive(recorded.pid) and working_dir(recorded.pid).startswith(marker)}


def lldpcli_argv(lab: Lab, node: str) -> list[str]:
    return [LLDPCLI, "-u", str(socket_path(lab, node))]


def neighbors(lab: Lab, node: str) -> dict[str, Neighbor]:
    """Port name -> what LLDP hears on it now, from the node's lldpd ({} before its first frame).
    Asked through lldpd's own client library (what lldpcli uses): about 0.1 ms a switch, where
    running lldpcli cost 3 ms of CPU, most of a config-audit sweep."""
    lib = _lib()
    conn = lib.lldpctl_new_name(str(socket_path(lab, node)).encode(), None, None, None)
    if not conn:
        raise RuntimeBackendError(f"cannot talk to lldpd of {node}: out of memory")
    try:
        interfaces = lib.lldpctl_get_interfaces(conn)
        if not interfaces:
            error = lib.lldpctl_strerror(lib.lldpctl_last_error(conn)).decode()
            raise RuntimeBackendError(f"lldpd of {node} did not answer: {error}",
                                      hint=f"is it running? its log: {directory(lab, node) / 'lldpd.log'}")
        try:
            heard = dict(_each(lib, interfaces, lambda interface: _port_heard(lib, interface)))
        finally:
            lib.lldpctl_atom_dec_ref(interfaces)
    finally:
        lib.lldpctl_release(conn)
    return heard


def _port_heard(lib, interface) -> tuple[str, Neighbor] | None:
    """(port name, the neighbour it hears now), named by the neighbour's system name and port id
    (an ifname: every node of a lab sends `portidsubtype ifname`)."""
    name = lib.lldpctl_atom_get_str(interface, K_INTERFACE_NAME)
    port = lib.lldpctl_get_port(interface)
    if not port:
        return None
    try:
        neighbors = lib.lldpctl_atom_get(port, K_PORT_NEIGHBORS)
        if not neighbors or name is None:
            return None
        try:
            found = _each(lib, neighbors, lambda remote: _remote(lib, remote))
        finally:
            lib.lldpctl_atom_dec_ref(neighbors)
        # A port moved to another cable still lists the old neighbour until its frames' TTL runs
        # out (4 s): the one first heard last is what the cable brings now.
        return (name.decode(), max(found, key=lambda heard: heard[0])[1]) if found else None
    finally:
        lib.lldpctl_atom_dec_ref(port)


def _remote(lib, remote) -> tuple[int, Neighbor] | None:
    """(when it was first heard as it is, seconds since the epoch; the neighbour)."""
    chassis = lib.lldpctl_atom_get(remote, K_PORT_CHASSIS)
    if not chassis:
        return None
    try:
        system = lib.lldpctl_atom_get_str(chassis, K_CHASSIS_NAME)
    finally:
        lib.lldpctl_atom_dec_ref(chassis)
    port_id = lib.lldpctl_atom_get_str(remote, K_PORT_ID)
    if system is None or port_id is None:
        return None
    return lib.lldpctl_atom_get_int(remote, K_PORT_AGE), Neighbor(system.decode(), port_id.decode())


def _each(lib, atom, visit: Callable[[int], object]) -> list:
    """visit(value) for each value of a list atom, what it returns collected (None left out). A
    value is the library's reference for one step, released after its visit, as its foreach does."""
    results, cursor = [], lib.lldpctl_atom_iter(atom)
    while cursor:
        value = lib.lldpctl_atom_iter_value(atom, cursor)
        if value:
            try:
                result = visit(value)
            finally:
                lib.lldpctl_atom_dec_ref(value)
            if result is not None:
                results.append(result)
        cursor = lib.lldpctl_atom_iter_next(atom, cursor)
    return results


@cache
def _lib() -> ctypes.CDLL:
    """liblldpctl, lldpd's client library (the soname of lldpd 1.x), loaded once."""
    try:
        lib = ctypes.CDLL(LIBRARY)
    except OSError as exc:
        raise MissingDependencyError(f"cannot load {LIBRARY}: {exc}", hint="run `make deps` (installs lldpd)") from None
    pointer = ctypes.c_void_p
    for name, result, arguments in (
            ("lldpctl_new_name", pointer, [ctypes.c_char_p, pointer, pointer, pointer]),
            ("lldpctl_release", ctypes.c_int, [pointer]),
            ("lldpctl_last_error", ctypes.c_int, [pointer]),
            ("lldpctl_strerror", ctypes.c_char_p, [ctypes.c_int]),
            ("lldpctl_get_interfaces", pointer, [pointer]),
            ("lldpctl_get_port", pointer, [pointer]),
            ("lldpctl_atom_get", pointer, [pointer, ctypes.c_int]),
            ("lldpctl_atom_get_str", ctypes.c_char_p, [pointer, ctypes.c_int]),
            ("lldpctl_atom_get_int", ctypes.c_long, [pointer, ctypes.c_int]),
            ("lldpctl_atom_iter", pointer, [pointer]),
            ("lldpctl_atom_iter_next", pointer, [pointer, pointer]),
            ("lldpctl_atom_iter_value", pointer, [pointer, pointer]),
            ("lldpctl_atom_dec_ref", None, [pointer])):
        getattr(lib, name).restype = result
        getattr(lib, name).argtypes = arguments
    # Its warnings would go to our stderr; a failure comes back as a value (lldpctl_last_error).
    lib.lldpctl_log_callback.argtypes = [_LOG_CALLBACK]
    lib.lldpctl_log_callback(_IGNORE_LOG)
    return lib


_LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p)
_IGNORE_LOG = _LOG_CALLBACK(lambda severity, message: None)  # kept alive here: the library holds it
