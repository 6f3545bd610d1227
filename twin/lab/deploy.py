"""Bring a lab up (ordered steps, each recorded before it acts) and tear it down.

up:   CPUs kept awake -> neighbour-table reservation -> namespaces -> sysctls -> links -> interfaces, routing, shaping
      -> PFC controller -> BFD data plane -> FRR -> convergence
down: daemons by recorded pid -> every node carrying this lab's prefix -> the lab directory
A failure or Ctrl-C during `up` tears down whatever was built.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from twin.errors import LabStateError, RuntimeBackendError
from twin.lab import awake, capacity, idle, neigh
from twin.lab.bfd import client as bfd_client
from twin.lab.handle import Lab
from twin.lab.kernel import netconf, nlbatch, offload, shaping, vxlan
from twin.lab.kernel.nsutil import interface_indexes
from twin.lab.pfc import client as pfc_client
from twin.lab.ports import phy
from twin.lab.routing import converge, frr, lldp, preflight
from twin.lab.runtime import get_runtime, names
from twin.lab.state import LabState, Resource, lab_dir, load_state
from twin.model import serialize
from twin.model.buffers import port_shaping
from twin.model.daemons import DAEMONS, start_groups
from twin.model.fabric import Fabric
from twin.model.ports import Port
from twin.names import lab_name
from twin.procs import alive, cmdline, kill, terminate, working_dir
from twin.progress import NullProgress, Progress
from twin.signals import deferred_interrupts, sigterm_as_interrupt
from twin.spec.labfile import LabFile

NODE_WORKERS = 8


@contextmanager
def _timed(state: LabState, name: str) -> Iterator[None]:
    start = time.monotonic()
    yield
    state.timings_s[name] = round(time.monotonic() - start, 3)


def up(lab_file: LabFile, fabric: Fabric, progress: Progress | None = None, timeout_s: float = 60.0,
       all_pairs: bool = False) -> Lab:
    """Build the lab and wait until it has converged (`all_pairs`: every host NIC pair reachable,
    not the sample of converge.wait_reachable)."""
    progress = progress or NullProgress()
    preflight.check(lab_file)
    runtime = get_runtime(fabric.runtime, fabric.name)
    if load_state(fabric.name) is not None or runtime.owned():
        raise LabStateError(f"lab '{fabric.name}' is already up (or left over from a crash)",
                            hint=f"twin lab down {fabric.name}")
    too_big = capacity.refusal(fabric)
    if too_big is not None:
        raise too_big
    if fabric.machine:
        if runtime.kind != "netns":
            raise LabStateError(f"a split lab runs on network namespaces, not {runtime.kind}",
                                hint="--runtime netns; containerlab runs a split on containers: twin export --hosts N")
        vxlan.check_underlay(fabric)
    runtime.preflight(fabric.local_nodes)
    for warning in (idle.bfd_warning(fabric), frr.preloads_missing(runtime)):
        if warning:
            progress.note(f"warning: {warning}")
    state = LabState(lab=fabric.name, runtime=runtime.kind, lab_file=str(lab_file.path.resolve()))
    state.save()
    lab = Lab(fabric, state, runtime)
    # Later commands read the lab as it was built: its model, and a copy of its file for people.
    serialize.save(fabric, lab.paths.model)
    shutil.copyfile(lab_file.path, lab.paths.lab_file)
    started = time.monotonic()
    owner = os.getpid()
    with sigterm_as_interrupt():
        try:
            _build(lab, progress, timeout_s, all_pairs)
        except BaseException:
            if os.getpid() != owner:  # a forked helper: never tear down from it
                os._exit(1)
            state.status = "failed"
            state.save()
            progress.note("deploy failed: tearing down what was built")
            down(fabric.name, progress)
            raise
    state.timings_s["total"] = round(time.monotonic() - started, 3)
    state.status = "up"
    state.save()
    return lab


@dataclass
class Build:
    """What the phases of a bring-up share: the lab, its progress, and the time convergence may take."""
    lab: Lab
    progress: Progress
    timeout_s: float
    all_pairs: bool
    deadline: float = 0.0  # set when routing starts: the timeout covers convergence, not the build


def _cpus_awake(build: Build) -> None:
    build.progress.phase("keeping the CPUs awake (the ports' timers)", None)
    if (refused := awake.start(build.lab)) is not None:
        build.progress.note(refused)


def _namespaces(build: Build) -> None:
    lab, progress = build.lab, build.progress
    nodes = lab.fabric.local_nodes
    neigh.reserve(lab.name, neigh.entries_needed(lab.fabric))  # released by down()
    progress.phase("namespaces", len(nodes))
    for node in nodes:
        lab.state.resources.append(Resource(kind=lab.runtime.kind, name=lab.runtime.resource_name(node.name),
                                            node=node.name))
    lab.state.save()  # every node recorded before the first is created

    def create(node) -> None:
        lab.runtime.create_node(node)
        progress.advance()
    # In parallel: a container takes ~0.2 s to start, mostly waiting on the daemon.
    with ThreadPoolExecutor(max_workers=NODE_WORKERS) as pool:
        list(pool.map(create, nodes))


def _sysctls(build: Build) -> None:
    lab = build.lab
    nodes = lab.fabric.local_nodes
    build.progress.phase("sysctls", len(nodes))
    for node in nodes:
        netconf.configure_sysctls(lab.netns(node.name), lab.fabric, node)
        build.progress.advance()


def _links(build: Build) -> None:
    lab, fabric = build.lab, build.lab.fabric
    build.progress.phase("links", len(fabric.local_links) + len(fabric.seam_links))
    lab.runtime.create_links(fabric.local_links, build.progress.advance)
    if fabric.machine:  # a share of a split lab: its links to the other machines
        vxlan.create_tunnels(fabric, lab.netns, build.progress.advance)


def _addresses_and_shaping(build: Build) -> None:
    lab, fabric = build.lab, build.lab.fabric
    nodes = fabric.local_nodes
    build.progress.phase("addresses, routes, shaping", len(nodes))
    for node in nodes:
        with nlbatch.Sender(lab.netns(node.name), node.name) as sender:
            indexes = netconf.configure_interfaces(sender, interface_indexes(lab.netns(node.name)), fabric, node)
            for ifname, index in indexes.items():
                sender.add(shaping.requests(*port_shaping(fabric, Port(node.name, ifname))), index, f"shaping {ifname}")
            sender.flush()
        if node.role == "host":
            with lab.netlink(node.name) as ipr:
                netconf.configure_host_routing(ipr, fabric, node, indexes)
            offload.segment_in_software(lab.netns(node.name), list(indexes))
        build.progress.advance()


def _queue_programs(build: Build) -> None:
    build.progress.phase("queue programs (PFC, ECN) and controller", None)
    pfc_client.start(build.lab)


def _physical_layer(build: Build) -> None:
    build.progress.phase("physical layer on every port", None)
    phy.attach(build.lab)  # after the queue programs: they replace the ports' clsact qdiscs


def _lldp(build: Build) -> None:
    lab = build.lab
    build.progress.phase("LLDP (lldpd on every node)", len(lab.fabric.local_nodes))
    lldp.start(lab, build.progress.advance)


def _bfd_data_plane(build: Build) -> None:
    build.progress.phase("BFD data plane (every switch's BFD packets and timers)", None)
    bfd_client.start(build.lab)


def _frr_start(build: Build) -> None:
    lab, switches = build.lab, build.lab.fabric.local_switches
    build.progress.phase("FRR daemons", len(switches) * len(DAEMONS))
    for node in switches:
        frr.write_configs(lab.fabric, node, lab.state.node_dir(node.name))
    for group in start_groups():
        for daemon in group:
            frr.start_daemons(lab, [n.name for n in switches], daemon, build.progress.advance)
        frr.wait_sockets(lab, [n.name for n in switches], group)


def _bgp_release(build: Build) -> None:
    lab, switches = build.lab, build.lab.fabric.local_switches
    build.deadline = time.monotonic() + build.timeout_s
    build.progress.phase("BGP sessions opened, tier by tier, once bgpd knows its interfaces", len(switches))
    frr.release_sessions(lab, switches, build.deadline, build.progress.advance)


def _bgp_ecmp(build: Build) -> None:
    converge.wait_routing(build.lab, build.progress, build.deadline)


def _bfd(build: Build) -> None:
    lab, switches = build.lab, build.lab.fabric.local_switches
    build.progress.phase("binding BFD to BGP sessions", len(switches))
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in pool.map(lambda node: frr.bind_bfd(lab, node), switches):
            build.progress.advance()
    converge.wait_bfd(lab, build.progress, build.deadline)


def _reachability(build: Build) -> None:
    converge.wait_reachable(build.lab, build.progress, build.deadline, build.all_pairs)


@dataclass(frozen=True)
class Phase:
    """One stage of a bring-up, in order; its name keys the state's `timings_s` (`twin lab status`)."""
    name: str
    run: Callable[[Build], None]
    wanted: Callable[[Fabric], bool] = lambda _fabric: True


PHASES = (
    Phase("cpu-awake", _cpus_awake),
    Phase("namespaces", _namespaces),
    Phase("sysctls", _sysctls),
    Phase("links", _links),
    Phase("addresses+shaping", _addresses_and_shaping),
    Phase("pfc", _queue_programs, wanted=lambda fabric: fabric.queue_programs),
    Phase("phy", _physical_layer),
    Phase("lldp", _lldp, wanted=lambda fabric: fabric.lldp),
    Phase("bfd-dataplane", _bfd_data_plane, wanted=lambda fabric: fabric.bfd_offload),
    Phase("frr-start", _frr_start),
    Phase("bgp-release", _bgp_release),
    Phase("bgp-ecmp", _bgp_ecmp),
    Phase("bfd", _bfd),
    Phase("reachability", _reachability),
)


def _build(lab: Lab, progress: Progress, timeout_s: float, all_pairs: bool) -> None:
    build = Build(lab, progress, timeout_s, all_pairs)
    for phase in PHASES:
        if phase.wanted(lab.fabric):
            with _timed(lab.state, phase.name):
                phase.run(build)


def wait_converged(lab: Lab, progress: Progress | None = None, timeout_s: float = 90) -> None:
    """A lab that is up converges again (after a scenario on it): sessions that have heard from
    their peers since (converge.wait_sessions), routes, BFD, reachability."""
    progress = progress or NullProgress()
    deadline = time.monotonic() + timeout_s
    converge.wait_sessions(lab, progress, deadline, heard=True)
    converge.wait_routing(lab, progress, deadline)
    converge.wait_bfd(lab, progress, deadline)
    converge.wait_reachable(lab, progress, deadline)


@dataclass
class TeardownReport:
    lab: str
    nodes_removed: int
    daemons_stopped: int
    had_state: bool


@contextmanager
def running(lab_file: LabFile, fabric: Fabric, progress: Progress | None = None, timeout_s: float = 60.0,
            all_pairs: bool = False) -> Iterator[Lab]:
    """`with running(lab_file, fabric) as lab:` the lab up (as `up`) for the block and down after it,
    however the block ends. (Not `Lab.up`: the handle sits below its own bring-up in lab/'s rooms.)"""
    lab = up(lab_file, fabric, progress, timeout_s, all_pairs)
    try:
        yield lab
    finally:
        down(fabric.name, progress)


def down(lab: str, progress: Progress | None = None) -> TeardownReport:
    """Remove everything lab `lab` owns; idempotent, works from a partial or missing state.
    Ctrl-C and SIGTERM wait until it is done."""
    lab = lab_name(lab)  # never a path: it is joined onto the run directory and prefixes every namespace
    with deferred_interrupts():
        return _down(lab, progress or NullProgress())


# What these processes would undo on SIGTERM lives only in the lab's namespaces, which go next:
# zebra withdraws every route it installed, and the PFC controller opens 4,608 gates and closes its
# per-port sockets and programs, an RCU grace period after another (60 s at pod128; it was killed
# after 0.5 s anyway).
KILLED_AT_TEARDOWN = ("daemon", "controller")


def _down(lab: str, progress: Progress) -> TeardownReport:
    state = load_state(lab)
    if state is not None:
        state.status = "tearing-down"
        state.save()
    marker = str(lab_dir(lab))
    # Recorded daemons and fault agents first, each verified to still be this lab's process.
    owned = [r for r in (state.resources if state else [])
             if r.pid and alive(r.pid) and (marker in cmdline(r.pid) or marker in working_dir(r.pid))]
    pids = [r.pid for r in owned]
    progress.phase("stopping daemons", None)
    kill([r.pid for r in owned if r.kind in KILLED_AT_TEARDOWN])
    terminate(pids)
    removed = 0
    for kind in names():
        runtime = get_runtime(kind, lab)
        owned = runtime.owned()
        if not owned:  # a netns lab has no containers: no phase to show
            continue
        progress.phase(f"removing {kind} nodes", len(owned))

        def delete(node: str, runtime=runtime) -> None:
            try:
                runtime.delete_node(node)
            except RuntimeBackendError as exc:
                progress.note(str(exc))
            progress.advance()
        with ThreadPoolExecutor(max_workers=NODE_WORKERS) as pool:
            list(pool.map(delete, owned))
        removed += len(owned)
    directory = lab_dir(lab)
    if directory.is_dir() and not directory.is_symlink():  # a link planted there points elsewhere
        shutil.rmtree(directory, ignore_errors=True)
    neigh.release(lab)
    return TeardownReport(lab=lab, nodes_removed=removed, daemons_stopped=len(pids),
                          had_state=state is not None)
