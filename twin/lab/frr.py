"""FRR per switch: rendered configs and sockets in the lab's own node directory, daemons by pid.

Each switch gets <run>/<lab>/nodes/<switch>/ holding <daemon>.conf, pid files, the
zserv and vty sockets and frr.log. Daemons run in the switch's namespace as the
`frr` user, with no TCP vty (-P 0) and no pathspace (-N would create global dirs).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
import time
from pathlib import Path

from twin.errors import MissingDependencyError, RuntimeBackendError
from twin.model.fabric import Fabric, Node
from twin.procs import alive, cmdline, terminate
from twin.model.render import DAEMONS, SOCKET_OF, START_ORDER, render_bfd_binding, render_switch
from twin.lab.runtime import Runtime
from twin.lab.state import LabState, Resource

FRR_DIR = Path("/usr/lib/frr")
VTYSH = "vtysh"
# FRR sizes its per-fd tables from the fd limit; a switch needs a few dozen sockets.
FD_LIMIT = 1024
SPAWN_WORKERS = 8


def check_installed() -> None:
    missing = [d for d in DAEMONS if not (FRR_DIR / d).is_file()]
    if missing or shutil.which(VTYSH) is None:
        raise MissingDependencyError(f"FRR is not installed (missing: {', '.join(missing) or VTYSH})",
                                     hint="run `make deps` (installs Debian's frr package)")
    try:
        pwd.getpwnam("frr")
    except KeyError:
        raise MissingDependencyError("the 'frr' user does not exist",
                                     hint="reinstall Debian's frr package") from None


def write_configs(fabric: Fabric, node: Node, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for daemon, text in render_switch(fabric, node).items():
        (directory / f"{daemon}.conf").write_text(text)
    frr = pwd.getpwnam("frr")
    for path in (directory, *directory.iterdir()):
        os.chown(path, frr.pw_uid, frr.pw_gid)


def daemon_argv(daemon: str, directory: Path) -> list[str]:
    argv = [str(FRR_DIR / daemon), "-P", "0", "--limit-fds", str(FD_LIMIT), "-f", str(directory / f"{daemon}.conf"),
            "-i", str(directory / f"{daemon}.pid"), "-z", str(directory / "zserv.api"),
            "--vty_socket", str(directory), "--log", f"file:{directory / 'frr.log'}"]
    if daemon == "bfdd":
        argv += ["--bfdctl", str(directory / "bfdd.sock")]
    return argv


def start_daemons(runtime: Runtime, state: LabState, nodes: list[str], daemon: str,
                  on_started: Callable[[], None] = lambda: None) -> None:
    """Start `daemon` on every node in parallel; all are recorded in the state file first."""
    resources = [Resource(kind="daemon", name=f"{node}/{daemon}", node=node) for node in nodes]
    state.resources.extend(resources)
    state.save()

    def spawn(resource: Resource) -> None:
        directory = state.node_dir(resource.node)
        resource.pid = runtime.spawn(resource.node, daemon_argv(daemon, directory), directory / "daemons.out")
        on_started()

    try:
        with ThreadPoolExecutor(max_workers=SPAWN_WORKERS) as pool:
            list(pool.map(spawn, resources))
    finally:
        state.save()  # the pids of whatever did start, also when one spawn failed


def daemon_health(state: LabState, node: str) -> dict[str, bool]:
    """daemon -> running, judged by the recorded pid still being that daemon of this lab."""
    health = {}
    marker = str(state.node_dir(node))
    for res in state.daemons():
        if res.node == node:
            daemon = res.name.split("/", 1)[1]
            health[daemon] = bool(res.pid) and alive(res.pid) and marker in cmdline(res.pid)
    return health


def vtysh_json(runtime: Runtime, state: LabState, node: str, command: str, timeout: float = 10):
    """Run one `show ... json` command on a switch and return the parsed JSON."""
    result = runtime.exec(node, vtysh_argv(state, node, command), timeout=timeout)
    if result.rc != 0:
        raise RuntimeBackendError(f"vtysh on {node}: {command!r} failed: {result.stderr.strip() or result.stdout.strip()}")
    try:
        return json.loads(result.stdout or "{}")
    except json.JSONDecodeError as exc:
        raise RuntimeBackendError(f"vtysh on {node}: {command!r} returned no JSON") from exc


def vtysh_argv(state: LabState, node: str, *commands: str) -> list[str]:
    argv = [VTYSH, "--vty_socket", str(state.node_dir(node))]
    for command in commands:
        argv += ["-c", command]
    return argv


def configure_bgp(runtime: Runtime, state: LabState, node: Node, *commands: str) -> None:
    """Apply BGP configuration commands on a running switch (vtysh, as an operator would)."""
    argv = vtysh_argv(state, node.name, "configure terminal", f"router bgp {node.asn}", *commands)
    result = runtime.exec(node.name, argv)
    if result.rc != 0:
        raise RuntimeBackendError(f"vtysh on {node.name} failed: {result.stderr.strip() or result.stdout.strip()}")


def wait_sockets(state: LabState, nodes: list[str], daemons: tuple[str, ...], timeout_s: float = 10) -> None:
    """Wait until each daemon has created its socket (it is listening), or fail naming it."""
    deadline = time.monotonic() + timeout_s
    missing = [(n, d) for n in nodes for d in daemons]
    while missing:
        missing = [(n, d) for n, d in missing if not (state.node_dir(n) / SOCKET_OF[d]).exists()]
        if missing and time.monotonic() > deadline:
            node, daemon = missing[0]
            raise RuntimeBackendError(f"{daemon} on {node} did not start within {timeout_s:.0f} s",
                                      hint=f"see {state.node_dir(node) / 'frr.log'}")
        time.sleep(0.02)



def bind_bfd(runtime: Runtime, state: LabState, node: Node) -> None:
    """Bind BFD to the switch's BGP sessions (after they are up; see templates/frr/bgpd.conf.j2)."""
    result = runtime.exec(node.name, vtysh_argv(state, node.name, *render_bfd_binding(node)))
    if result.rc != 0:
        raise RuntimeBackendError(f"cannot bind BFD on {node.name}: {result.stderr.strip() or result.stdout.strip()}")


def node_pids(state: LabState, node: str) -> list[int]:
    marker = str(state.node_dir(node))
    return [r.pid for r in state.daemons() if r.node == node and r.pid and alive(r.pid)
            and marker in cmdline(r.pid)]


def stop_node(state: LabState, node: str) -> None:
    """Stop every FRR daemon of a switch (by recorded pid) and remove its stale sockets."""
    terminate(node_pids(state, node))
    for socket_name in SOCKET_OF.values():
        (state.node_dir(node) / socket_name).unlink(missing_ok=True)


def restart_node(runtime: Runtime, state: LabState, node: Node, timeout_s: float = 30) -> None:
    """Start a stopped switch's daemons from its configs, wait for BGP, then bind BFD."""
    directory = state.node_dir(node.name)
    for group in START_ORDER:
        for daemon in group:
            resource = next(r for r in state.daemons() if r.name == f"{node.name}/{daemon}")
            resource.pid = runtime.spawn(node.name, daemon_argv(daemon, directory), directory / "daemons.out")
            state.save()
        wait_sockets(state, [node.name], group)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            peers = vtysh_json(runtime, state, node.name, "show bgp summary json")["ipv4Unicast"]["peers"]
            if peers and all(p.get("state") == "Established" for p in peers.values()):
                break
        except (RuntimeBackendError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeBackendError(f"BGP on {node.name} did not come back within {timeout_s:.0f} s")
        time.sleep(0.2)
    bind_bfd(runtime, state, node)
