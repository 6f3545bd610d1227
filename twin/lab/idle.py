"""What a lab costs at rest: CPU and memory of the processes it owns (FRR daemons, the PFC
controller, agents), sampled from /proc, against what the machine has; and what its BFD timers
will cost before it is built.

BFD dominates a big lab at rest. Its cost per packet sent (its reception included), measured on
this 2-core machine at rest on pod64 (1,024 sessions at 300 ms x 3; bench/bfd_offload.py,
docs/benchmarks.md "BFD data plane", 2026-11-30): 104 us when each switch's bfdd sends its own,
15 us when the lab's BFD data plane sends for all (lab/bfd/), its steady packets in the kernel's
fast path: most of that is the kernel forwarding the packet through the twin's ports (41 us
before the fast path, when every packet crossed the data plane's sockets). (Issue 18 measured
0.37 ms for bfdd, before FRR's daemons ran with the ppoll fix of native/.)
bgpd at rest: keepalives, 0.69 core for pod128's 4,096 sessions at one a second, 0.22 at one
every 3 s: the cost goes with the keepalive rate (model/render.py, bgp_keepalive_s).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from twin.lab.state import LabState
from twin.model.fabric import Fabric
from twin.model.render import BGP_CORES_PER_SESSION_KEEPALIVE, bgp_keepalive_s, session_ends
from twin.procs import alive
from twin.units import period_within

BFDD_CPU_S_PER_PACKET = 104e-6
DATA_PLANE_CPU_S_PER_PACKET = 15e-6
# RFC 5880's jitter sends each packet after 75-100 % of the interval: on average 1/0.875 packets
# per interval
MEAN_JITTER = 0.875
# A lab at rest may take this share of the machine's cores; past it, workloads (collectives, probes,
# the PFC controller's reactions) compete with the fabric's own chatter.
REST_SHARE = 0.3


def bfd_sessions(fabric: Fabric) -> int:
    """One session at each end of every switch-to-switch link, as BGP's."""
    return session_ends(fabric)


def bfd_cpu_s_per_packet(fabric: Fabric, offload: bool | None = None) -> float:
    """offload: whether the lab's BFD data plane sends (default: as the fabric says)."""
    offload = fabric.bfd_offload if offload is None else offload
    return DATA_PLANE_CPU_S_PER_PACKET if offload else BFDD_CPU_S_PER_PACKET


def bfd_packets_per_s(sessions: int, interval_ms: int) -> float:
    return sessions * 1000.0 / interval_ms / MEAN_JITTER


def bfd_cores(fabric: Fabric, interval_ms: int | None = None) -> float:
    """Cores BFD of this fabric takes at rest (bfdd's processes, or the data plane), from the
    measured cost per packet."""
    interval_ms = interval_ms or fabric.bfd_interval_ms
    return bfd_packets_per_s(bfd_sessions(fabric), interval_ms) * bfd_cpu_s_per_packet(fabric)


def bfd_interval_that_fits(fabric: Fabric, cores: float) -> int:
    """The shortest BFD interval (ms, rounded up to 100) whose cost stays within `cores`."""
    # the CPU time one interval's packets take, in ms (a packet a session an interval)
    cost_ms = bfd_packets_per_s(bfd_sessions(fabric), 1) * bfd_cpu_s_per_packet(fabric)
    return max(100, int(period_within(cost_ms, cores, step=100)))


def machine_cores() -> int:
    return len(os.sched_getaffinity(0))


def bfd_warning(fabric: Fabric) -> str | None:
    """A warning when the lab's BFD timers alone take more than its share of the machine."""
    budget = REST_SHARE * machine_cores()
    cost = bfd_cores(fabric)
    if cost <= budget:
        return None
    return (f"BFD every {fabric.bfd_interval_ms} ms on {bfd_sessions(fabric)} sessions will take about "
            f"{cost:.1f} of this machine's {machine_cores()} cores at rest; routing.bfd.interval_ms: "
            f"{bfd_interval_that_fits(fabric, budget)} keeps it within {budget:.1f} (detection then takes "
            f"interval x multiplier)")


@dataclass
class IdleCost:
    window_s: float
    cores: float  # the lab's own processes
    machine_busy_cores: float  # everything, kernel forwarding included
    machine_cores: int
    memory_mib: float  # PSS of the lab's processes
    switch_memory_mib: float  # per switch, mean
    by_program: dict[str, float] = field(default_factory=dict)  # cores per program (bfdd, bgpd, ...)
    warnings: list[str] = field(default_factory=list)


# What costs less at rest, by the program that costs most.
REST_HINTS = {
    "bfdd": "longer BFD intervals cost less (routing.bfd.interval_ms)",
    "bfd/dataplane": "longer BFD intervals cost less (routing.bfd.interval_ms)",
    "bgpd": "bgpd may still be taking in updates (right after a bring-up or a fault: measure again); its "
            "keepalives alone are spaced to take at most 0.1 of a core",
    "lldp": "`lldp: false` saves LLDP's frames (config-audit then cannot see a miswire)",
}


def family_ticks(pids: Iterable[int]) -> dict[int, int | None]:
    """Each process's CPU ticks with its children's, from one pass over /proc: lldpd's monitor
    (the pid the lab records) leaves the work to an unprivileged child, 0.41 of a core at pod128
    that the lab's figure left out ("lldp 0.00"). None for a process that is gone."""
    wanted = set(pids)
    family: dict[int, int | None] = {pid: None for pid in wanted}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        ticks, pid, parent = int(fields[11]) + int(fields[12]), int(entry), int(fields[1])
        if pid in wanted:
            family[pid] = (family[pid] or 0) + ticks
        elif parent in wanted:
            family[parent] = (family[parent] or 0) + ticks
    return family


def _machine_ticks() -> tuple[int, int]:
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values), values[3] + values[4]  # all, idle + iowait


def pss_kib(pid: int) -> int:
    """Proportional set size: shared pages (FRR's libraries) split among the processes sharing them."""
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return int(re.search(r"^Pss:\s+(\d+) kB", text, re.M).group(1))


def measure(state: LabState, window_s: float = 2.0) -> IdleCost:
    """Sample the lab's recorded processes over `window_s`."""
    processes = {r.pid: r for r in state.resources if r.pid and alive(r.pid)}
    before = family_ticks(processes)
    machine_before = _machine_ticks()
    time.sleep(window_s)
    after = family_ticks(processes)
    machine_after = _machine_ticks()
    hz = os.sysconf("SC_CLK_TCK")
    by_program: dict[str, float] = {}
    for pid, resource in processes.items():
        if before[pid] is None or after[pid] is None:
            continue
        # a daemon by its name (bfdd, ...), the lab's own processes by theirs (pfc/controller, bfd/dataplane)
        program = resource.name.split("/")[-1] if resource.kind == "daemon" else \
            resource.name if resource.kind == "controller" else resource.kind
        by_program[program] = by_program.get(program, 0.0) + (after[pid] - before[pid]) / hz / window_s
    total, idle = (a - b for a, b in zip(machine_after, machine_before))
    cores = machine_cores()
    per_switch: dict[str, int] = {}
    memory = 0
    for pid, resource in processes.items():
        try:
            kib = pss_kib(pid)
        except (OSError, AttributeError):
            continue
        memory += kib
        if resource.kind == "daemon" and resource.node:
            per_switch[resource.node] = per_switch.get(resource.node, 0) + kib
    cost = IdleCost(window_s=window_s, cores=round(sum(by_program.values()), 3),
                    machine_busy_cores=round(cores * (1 - idle / total), 3) if total else 0.0,
                    machine_cores=cores, memory_mib=round(memory / 1024, 1),
                    switch_memory_mib=round(sum(per_switch.values()) / 1024 / len(per_switch),
                                            1) if per_switch else 0.0,
                    by_program={k: round(v, 3) for k, v in sorted(by_program.items(), key=lambda kv: -kv[1])})
    if cost.cores > REST_SHARE * cores:
        top = ", ".join(f"{k} {v:.2f}" for k, v in list(cost.by_program.items())[:3])
        cost.warnings.append(f"the lab takes {cost.cores:.2f} of {cores} cores at rest ({top}): little is left "
                             f"for workloads; {REST_HINTS.get(next(iter(cost.by_program)), REST_HINTS['bfdd'])}")
    return cost


# Measured at rest on this machine (docs/benchmarks.md "BFD data plane" and "Lab lifecycle"): bgpd
# per session and keepalive a second (model/render.py), FRR's PSS per switch (zebra, bfdd and bgpd,
# shared libraries split among them) of a rail4-size lab: a switch holding more routes and paths
# takes more (pod64 24.1 MiB, pod128 35.5 MiB), so the plan's memory is a floor.
SWITCH_MEMORY_MIB = 18.7


@dataclass
class MachineEstimate:
    machine: int  # 1-based
    switches: int
    hosts: int
    local_links: int
    vxlan_links: int  # links to other machines
    bfd_sessions: int
    cores: float  # at rest: BFD and BGP
    memory_mib: float


def machine_estimates(fabric: Fabric, where: dict[str, int], machines: int,
                      offload: bool | None = None) -> list[MachineEstimate]:
    """Per machine of a split lab: what runs there and what it costs at rest, from the measured costs.
    offload: BFD in the lab's data plane (default: as the fabric says); a containerlab export's
    switches run bfdd's own (model/export.py)."""
    estimates = []
    for machine in range(machines):
        switches = [n for n in fabric.switches if where[n.name] == machine]
        sessions = sum(1 for n in switches for link in fabric.links_of(n.name) if link.kind == "fabric")
        touching = [link for link in fabric.links if machine in (where[link.a.node], where[link.b.node])]
        crossing = sum(1 for link in touching if where[link.a.node] != where[link.b.node])
        cores = (bfd_packets_per_s(sessions, fabric.bfd_interval_ms) * bfd_cpu_s_per_packet(fabric, offload)
                 + sessions * BGP_CORES_PER_SESSION_KEEPALIVE / bgp_keepalive_s(fabric))
        estimates.append(MachineEstimate(machine + 1, len(switches),
                                         sum(1 for n in fabric.hosts if where[n.name] == machine),
                                         len(touching) - crossing, crossing, sessions, round(cores, 2),
                                         round(len(switches) * SWITCH_MEMORY_MIB, 0)))
    return estimates
