"""LLDP on every node (Debian's lldpd), as every switch and server of the fabrics we twin runs it:
each port announces its node and port name once a second, so each switch port knows who is cabled
to it, and config-audit (detect/config_audit.py) compares that with the lab.

One lldpd per node, started from the host inside the node's network namespace (any runtime; a
container image needs no lldpd), listening on the node's fabric ports only (-I), its control
socket and log in the node's directory (lldp/), recorded by pid like FRR's daemons. lldpd forks an
unprivileged child that dies with it. Hosts only send (`tx-only`): a NIC's frames are the
evidence the leaves need, and a miswire's wire element (faults/miswire.py) moves frames after
a packet socket on the host has already seen them.

Measured at rest (this VM, 2026-11-28): two processes of about 6.8 and 2.7 MB resident per node,
no CPU tick in 20 s with one frame per port a second.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from twin.errors import MissingDependencyError, RuntimeBackendError
from twin.lab.runtime import Runtime
from twin.lab.state import LabState, Resource
from twin.model.fabric import Fabric, Node

LLDPD, LLDPCLI = "lldpd", "lldpcli"
RESOURCE_KIND = "lldp"
TX_INTERVAL_S = 1  # lldpd's shortest; a neighbour is known within a second of its first frame
SPAWN_WORKERS = 8
QUERY_TIMEOUT_S = 5.0


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


def directory(state: LabState, node: str) -> Path:
    """Its own folder in the node's: FRR's setup hands the node's files to the frr user, and lldpcli
    (set-uid _lldpd) must still reach the socket lldpd gave it."""
    return state.node_dir(node) / "lldp"


def socket_path(state: LabState, node: str) -> Path:
    return directory(state, node) / "lldpd.socket"


def config(fabric: Fabric, node: Node) -> str:
    lines = [f"configure system hostname {node.name}",
             f"configure system description \"fabric-twin {node.role}\"",
             "configure lldp portidsubtype ifname",
             f"configure lldp tx-interval {TX_INTERVAL_S}"]
    if node.role == "host":
        lines.append("configure lldp status tx-only")
    return "\n".join(lines) + "\n"


def argv(fabric: Fabric, node: Node, folder: Path) -> list[str]:
    ports = sorted(link.endpoint(node.name).ifname for link in fabric.links_of(node.name))
    return [LLDPD, "-d", "-u", str(folder / "lldpd.socket"), "-O", str(folder / "lldpd.conf"),
            "-I", ",".join(ports)]


def start(runtime: Runtime, state: LabState, fabric: Fabric, on_started: Callable[[], None] = lambda: None) -> None:
    """lldpd on every node, in parallel; every one recorded in the state file before it starts."""
    nodes = [node for node in fabric.nodes.values() if fabric.links_of(node.name)]
    resources = [Resource(kind=RESOURCE_KIND, name=f"{node.name}/lldpd", node=node.name) for node in nodes]
    state.resources.extend(resources)
    state.save()

    def spawn(pair: tuple[Node, Resource]) -> None:
        node, resource = pair
        folder = directory(state, node.name)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "lldpd.conf").write_text(config(fabric, node))
        with open(folder / "lldpd.log", "ab") as log:
            proc = subprocess.Popen(["nsenter", f"--net={runtime.netns_path(node.name)}", *argv(fabric, node, folder)],
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


def lldpcli_argv(state: LabState, node: str) -> list[str]:
    return [LLDPCLI, "-u", str(socket_path(state, node))]


def neighbors(state: LabState, node: str) -> dict[str, Neighbor]:
    """Port name -> what LLDP hears on it now, from the node's lldpd ({} before its first frame)."""
    try:
        done = subprocess.run([*lldpcli_argv(state, node), "-f", "json0", "show", "neighbors"],
                              capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeBackendError(f"lldpd of {node} did not answer within {QUERY_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        raise RuntimeBackendError(f"lldpd of {node} did not answer: {done.stderr.strip() or done.returncode}",
                                  hint=f"is it running? its log: {directory(state, node) / 'lldpd.log'}")
    return parse_neighbors(done.stdout)


def parse_neighbors(text: str) -> dict[str, Neighbor]:
    """lldpcli's json0 (every level a list, whatever the count) -> port -> neighbour."""
    heard = {}
    for lldp in json.loads(text).get("lldp", []):
        for interface in lldp.get("interface", []):
            names = [name["value"] for chassis in interface.get("chassis", []) for name in chassis.get("name", [])]
            ports = [pid["value"] for port in interface.get("port", []) for pid in port.get("id", [])
                     if pid.get("type") == "ifname"]
            if names and ports:
                heard[interface["name"]] = Neighbor(names[0], ports[0])
    return heard
