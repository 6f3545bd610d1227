"""FRR per switch: rendered configs and sockets in the lab's own node directory, daemons by pid.

Each switch gets <run>/<lab>/nodes/<switch>/ holding <daemon>.conf, pid files, the
zserv and vty sockets and frr.log. Daemons run in the switch's namespace as the
`frr` user, with no TCP vty (-P 0) and no pathspace (-N would create global dirs).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from twin.errors import MissingDependencyError, RuntimeBackendError
from twin.lab.bfd.paths import DPLANE_SOCKET, dplane_option
from twin.lab.handle import Lab
from twin.lab.routing import vty
from twin.lab.routing.frr_answers import all_established, bgp_peers, established, heard, knows_prefix
from twin.lab.runtime import Runtime
from twin.lab.state import Resource
from twin.model.daemons import BFDD, DAEMONS, ZSERV_SOCKET, FrrDaemon, answering, start_groups
from twin.model.fabric import SWITCH_ROLES, Fabric, Node
from twin.model.render import bgp_neighbors, render_bfd_binding, render_switch
from twin.procs import alive, cmdline, terminate

FRR_DIR = Path("/usr/lib/frr")
# Fixes preloaded into a namespace lab's daemons (native/frr_<name>.c, built by `make deps`; a
# container's image does not have them), with what FRR does without each.
# FABRIC_TWIN_FRR_<NAME>=off runs FRR without one, for comparison.
NATIVE = Path(__file__).resolve().parents[1] / "native"
PRELOADS = {"ppoll": "FRR's daemons will spin before each timer (several times the CPU at rest)",
            "ringbuf": "bgpd will keep 320 KiB resident per BGP session (most of its memory)"}
VTYSH = "vtysh"
# FRR sizes its per-fd tables from the fd limit; a switch needs a few dozen sockets.
FD_LIMIT = 1024
SPAWN_WORKERS = 8
# Above this many BGP sessions a lab opens them a tier at a time (release_sessions): pod64 has
# 1,024 and pod128 4,096; rail8 has 96.
TIERED_SESSIONS = 512


def check_installed() -> None:
    missing = [d.name for d in DAEMONS if not (FRR_DIR / d.name).is_file()]
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
    for daemon, text in render_switch(fabric, node, held=True).items():
        (directory / f"{daemon}.conf").write_text(text)
    frr = pwd.getpwnam("frr")
    for path in (directory, *directory.iterdir()):
        os.chown(path, frr.pw_uid, frr.pw_gid)


def daemon_argv(daemon: FrrDaemon, directory: Path, bfd_offload: bool = False) -> list[str]:
    """The daemon's command line; bfd_offload: bfdd hands its sessions' packets and timers to the
    lab's BFD data plane (lab/bfd/dataplane.py) instead of sending them itself."""
    argv = [str(FRR_DIR / daemon.name), "-P", "0", "--limit-fds", str(FD_LIMIT), "-f", str(directory / daemon.config),
            "-i", str(directory / f"{daemon.name}.pid"), "-z", str(directory / ZSERV_SOCKET),
            "--vty_socket", str(directory), "--log", f"file:{directory / 'frr.log'}"]
    if daemon.control_socket:
        argv += ["--bfdctl", str(directory / daemon.control_socket)]
    if daemon.name == BFDD and bfd_offload:
        argv += ["--dplaneaddr", dplane_option(directory)]
    return argv


def preload_path(name: str) -> Path:
    return NATIVE / f"frr_{name}.so"


def _preloads_wanted(runtime: Runtime) -> list[str]:
    if runtime.kind != "netns":
        return []
    return [name for name in PRELOADS if os.environ.get(f"FABRIC_TWIN_FRR_{name.upper()}") != "off"]


def daemon_env(runtime: Runtime) -> dict[str, str] | None:
    """The daemons' environment: the fixes preloaded where they apply, else unchanged."""
    built = [str(preload_path(name)) for name in _preloads_wanted(runtime) if preload_path(name).is_file()]
    return {**os.environ, "LD_PRELOAD": ":".join(built)} if built else None


def preloads_missing(runtime: Runtime) -> str | None:
    """A warning when a fix should apply but was not built."""
    missing = [name for name in _preloads_wanted(runtime) if not preload_path(name).is_file()]
    if not missing:
        return None
    return "; ".join(f"{preload_path(name).name} is not built: {PRELOADS[name]}" for name in missing) + \
        "; run `make deps`"


def spawn_daemon(lab: Lab, node: str, daemon: FrrDaemon) -> int:
    directory = lab.state.node_dir(node)
    return lab.runtime.spawn(node, daemon_argv(daemon, directory, lab.fabric.bfd_offload), directory / "daemons.out",
                             env=daemon_env(lab.runtime))


def start_daemons(lab: Lab, nodes: list[str], daemon: FrrDaemon, on_started: Callable[[], None] = lambda: None) -> None:
    """Start `daemon` on every node in parallel; all are recorded in the state file first."""
    state = lab.state
    resources = [Resource(kind="daemon", name=f"{node}/{daemon.name}", node=node) for node in nodes]
    state.resources.extend(resources)
    state.save()

    def spawn(resource: Resource) -> None:
        resource.pid = spawn_daemon(lab, resource.node, daemon)
        on_started()

    try:
        with ThreadPoolExecutor(max_workers=SPAWN_WORKERS) as pool:
            list(pool.map(spawn, resources))
    finally:
        state.save()  # the pids of whatever did start, also when one spawn failed


def daemon_health(lab: Lab, node: str) -> dict[str, bool]:
    """daemon -> running, judged by the recorded pid still being that daemon of this lab."""
    health = {}
    marker = str(lab.state.node_dir(node))
    for res in lab.state.daemons():
        if res.node == node:
            daemon = res.name.split("/", 1)[1]
            health[daemon] = bool(res.pid) and alive(res.pid) and marker in cmdline(res.pid)
    return health


def vtysh_json(lab: Lab, node: str, command: str, timeout: float = 10):
    """Run one `show ... json` command on a switch and return the parsed JSON: straight on the
    daemon's vty socket (vty.py) when one daemon answers it, else through vtysh."""
    daemon = answering(command)
    if daemon is not None:
        text = vty.run(lab.state.node_dir(node) / daemon.vty_socket, [command], timeout,
                       what=f"{daemon.name} on {node}")
    else:
        result = lab.runtime.exec(node, vtysh_argv(lab, node, command), timeout=timeout)
        if result.rc != 0:
            why = result.stderr.strip() or result.stdout.strip()
            raise RuntimeBackendError(f"vtysh on {node}: {command!r} failed: {why}")
        text = result.stdout
    try:
        return json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise RuntimeBackendError(f"{node}: {command!r} returned no JSON") from exc


def vtysh_argv(lab: Lab, node: str, *commands: str) -> list[str]:
    argv = [VTYSH, "--vty_socket", str(lab.state.node_dir(node))]
    for command in commands:
        argv += ["-c", command]
    return argv


def configure_bgp(lab: Lab, node: Node, *commands: str, timeout_s: float = 10.0) -> None:
    """Apply BGP configuration commands on a running switch: what an operator types in vtysh,
    sent to bgpd's vty socket; `timeout_s` for each of its answers."""
    vty.run(lab.state.node_dir(node.name) / "bgpd.vty", ["configure terminal", f"router bgp {node.asn}", *commands],
            timeout_s=timeout_s, what=f"bgpd on {node.name}")


def configure_bgpd(lab: Lab, node: Node, *commands: str) -> None:
    """Configuration commands for bgpd outside `router bgp` (prefix lists, route maps), as an
    operator types them in vtysh, sent to bgpd's vty socket."""
    vty.run(lab.state.node_dir(node.name) / "bgpd.vty", ["configure terminal", *commands], what=f"bgpd on {node.name}")


# Lines of `show running-config` that are not configuration (build banners, separators).
CONFIG_BANNER = re.compile(r"^(Building configuration|Current configuration|frr version|!|end$)")


def running_config(lab: Lab, node: str, daemon: str) -> list[str]:
    """One daemon's running configuration, its banners left out: what to compare before and after."""
    text = vty.run(lab.state.node_dir(node) / f"{daemon}.vty", ["show running-config"], what=f"{daemon} on {node}")
    return [line for line in text.splitlines() if line.strip() and not CONFIG_BANNER.match(line)]


def bgpd_running_config(lab: Lab, node: Node) -> list[str]:
    """bgpd's running configuration, line by line."""
    return vty.run(lab.state.node_dir(node.name) / "bgpd.vty", ["show running-config"],
                   what=f"bgpd on {node.name}").splitlines()


def release_sessions(lab: Lab, nodes: list[Node], deadline: float, on_ready: Callable[[], None] = lambda: None) -> None:
    """Open the fabric sessions of `nodes`, held shut by their configs (render.py, `held`).

    A switch's sessions open once its bgpd has learnt its interfaces from zebra: one that connected
    before failed ("nexthop_set failed") and FRR doubled its idle hold time each time. And they
    open a tier at a time, from the leaves up, each tier once the one below is established: all
    4,096 of pod128 at once saturated the machine, hold timers expired and connections collided,
    and the backoff after those resets kept sessions coming up for 40 s. A lab of at most
    TIERED_SESSIONS sessions opens them all at once (rail4's tiers cost 2 s of waiting)."""
    fabric = lab.fabric
    _wait_interfaces(lab, nodes, deadline, on_ready)
    waves: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))  # tier -> node -> peers
    sessions = [(node, peer) for node in nodes for peer in bgp_neighbors(fabric, node)]
    tiered = len(sessions) > 2 * TIERED_SESSIONS  # each session has two ends
    for node, peer in sessions:
        tier = min(SWITCH_ROLES.index(node.role), SWITCH_ROLES.index(fabric.nodes[peer["name"]].role))
        waves[tier if tiered else 0][node.name].append(peer["address"])
    for number, tier in enumerate(sorted(waves)):
        for name, addresses in waves[tier].items():
            # as long as the bring-up may take: AIPod's superspine-1, busy with its first tier's
            # updates at a load of 480, took more than 10 s to answer
            configure_bgp(lab, fabric.nodes[name], *(f"no neighbor {a} shutdown" for a in addresses),
                          timeout_s=max(10.0, deadline - time.monotonic()))
        if number < len(waves) - 1:
            wait_established(lab, waves[tier], deadline)


def _wait_interfaces(lab: Lab, nodes: list[Node], deadline: float, on_ready: Callable[[], None]) -> None:
    """Until each bgpd holds its own loopback: a connected route zebra sends after the interfaces."""
    waiting = list(nodes)
    while waiting:
        still = []
        for node in waiting:
            try:
                ready = knows_prefix(vtysh_json(lab, node.name, f"show bgp ipv4 unicast {node.loopback}/32 json",
                                                timeout=2))
            except RuntimeBackendError:  # not in its table yet ("% Network not in table")
                ready = False
            if ready:
                on_ready()
            else:
                still.append(node)
        waiting = still
        if waiting and time.monotonic() > deadline:
            raise RuntimeBackendError(f"bgpd on {waiting[0].name} did not learn its interfaces from zebra in time "
                                      f"({len(waiting)} switches waiting)",
                                      hint=f"see {lab.state.node_dir(waiting[0].name) / 'frr.log'}")
        if waiting:
            time.sleep(0.05)


def session_marks(lab: Lab, sessions: dict[str, list[str]]) -> dict[tuple[str, str], tuple]:
    """(node, peer address) -> (messages read, connections established) of every session now, for
    wait_established to tell a session that has heard from its peer since from one that has not."""
    marks = {}
    for name, addresses in sessions.items():
        peers = _bgp_peers(lab, name) or {}
        marks |= {(name, a): heard(peers.get(a, {})) for a in addresses}
    return marks


def _bgp_peers(lab: Lab, name: str) -> dict | None:
    """Peer address -> its row of `show bgp summary json`; None while bgpd cannot say."""
    try:
        return bgp_peers(vtysh_json(lab, name, "show bgp summary json"))
    except RuntimeBackendError:
        return None


def wait_established(lab: Lab, sessions: dict[str, list[str]], deadline: float,
                     heard_since: dict[tuple[str, str], tuple] | None = None) -> None:
    """Until every session in `sessions` (node -> peer addresses) is Established; with
    `heard_since` (session_marks taken earlier), also until each has read a message since then."""
    waiting = dict(sessions)
    while waiting:
        for name in list(waiting):
            peers = _bgp_peers(lab, name)
            if peers is None:
                continue
            if all(established(peers.get(a, {}), (heard_since or {}).get((name, a))) for a in waiting[name]):
                del waiting[name]
        if waiting and time.monotonic() > deadline:
            name = next(iter(waiting))
            raise RuntimeBackendError(f"BGP sessions of {name} did not come up in time "
                                      f"({len(waiting)} switches waiting)",
                                      hint=f"see {lab.state.node_dir(name) / 'frr.log'}")
        if waiting:
            time.sleep(0.1)


def wait_sockets(lab: Lab, nodes: list[str], daemons: tuple[FrrDaemon, ...], timeout_s: float = 10) -> None:
    """Wait until each daemon has created its socket (it is listening), or fail naming it."""
    deadline = time.monotonic() + timeout_s
    state = lab.state
    missing = [(n, d) for n in nodes for d in daemons]
    while missing:
        missing = [(n, d) for n, d in missing if not (state.node_dir(n) / d.ready_socket).exists()]
        if missing and time.monotonic() > deadline:
            node, daemon = missing[0]
            raise RuntimeBackendError(f"{daemon.name} on {node} did not start within {timeout_s:.0f} s",
                                      hint=f"see {state.node_dir(node) / 'frr.log'}")
        time.sleep(0.02)



def bind_bfd(lab: Lab, node: Node) -> None:
    """Bind BFD to the switch's BGP sessions (after they are up; see templates/frr/bgpd.conf.j2)."""
    try:
        vty.run(lab.state.node_dir(node.name) / "bgpd.vty", render_bfd_binding(node), what=f"bgpd on {node.name}")
    except RuntimeBackendError as exc:
        raise RuntimeBackendError(f"cannot bind BFD: {exc}") from None


def node_pids(lab: Lab, node: str) -> list[int]:
    marker = str(lab.state.node_dir(node))
    return [r.pid for r in lab.state.daemons() if r.node == node and r.pid and alive(r.pid)
            and marker in cmdline(r.pid)]


def stop_node(lab: Lab, node: str) -> None:
    """Stop every FRR daemon of a switch (by recorded pid) and remove its stale sockets."""
    terminate(node_pids(lab, node))
    for socket_name in {name for daemon in DAEMONS for name in daemon.sockets()} | {DPLANE_SOCKET}:
        (lab.state.node_dir(node) / socket_name).unlink(missing_ok=True)


def restart_node(lab: Lab, node: Node, timeout_s: float = 30) -> None:
    """Start a stopped switch's daemons from its configs, wait for BGP, then bind BFD."""
    state = lab.state
    for group in start_groups():
        for daemon in group:
            resource = next(r for r in state.daemons() if r.name == f"{node.name}/{daemon.name}")
            resource.pid = spawn_daemon(lab, node.name, daemon)
            state.save()
        wait_sockets(lab, [node.name], group)
    deadline = time.monotonic() + timeout_s
    release_sessions(lab, [node], deadline)
    while True:
        if all_established(_bgp_peers(lab, node.name)):
            break
        if time.monotonic() > deadline:
            raise RuntimeBackendError(f"BGP on {node.name} did not come back within {timeout_s:.0f} s")
        time.sleep(0.2)
    bind_bfd(lab, node)
