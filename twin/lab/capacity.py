"""Whether this machine runs a lab, before `twin lab up` builds anything: what the lab will cost at
rest (FRR's bfdd and bgpd, from the costs measured per BFD packet and BGP session: lab/idle.py)
and in memory (FRR per switch), against the machine's cores and available memory. A lab that
does not fit is refused with the numbers, the machines it would fit on (the same split `twin
plan` and `twin export --hosts N` make) and the BFD interval that would fit here. `twin check`,
`plan` and `export` are not limited by this machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from twin.errors import TwinError
from twin.lab import idle
from twin.model.fabric import Fabric
from twin.model.partition import split

MEMORY_SHARE = 0.8  # of the memory available when the lab is built; the rest is the workloads'
MAX_MACHINES = 64  # as `--hosts` allows


@dataclass(frozen=True)
class Machine:
    cores: int
    memory_mib: float  # available (MemAvailable)


def this_machine() -> Machine:
    return Machine(idle.machine_cores(), available_mib())


def available_mib(meminfo: Path = Path("/proc/meminfo")) -> float:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise TwinError("/proc/meminfo has no MemAvailable", hint="a Linux kernel of 3.14 or later")


def fits(estimate: idle.MachineEstimate, machine: Machine) -> bool:
    return estimate.cores <= machine.cores and estimate.memory_mib <= MEMORY_SHARE * machine.memory_mib


def machines_needed(fabric: Fabric, machine: Machine) -> tuple[int, float, bool]:
    """The fewest machines like this one the lab's split fits on: (count, cores at rest on the
    busiest, True); when no split up to MAX_MACHINES fits, the one whose busiest machine is least
    busy, and False."""
    best = None
    for count in range(2, min(MAX_MACHINES, len(fabric.switches)) + 1):
        estimates = idle.machine_estimates(fabric, split(fabric, count), count, offload=False)  # the export's
        busiest = max(e.cores for e in estimates)
        if all(fits(e, machine) for e in estimates):
            return count, busiest, True
        if best is None or busiest < best[1]:
            best = (count, busiest)
    return (*best, False) if best else (1, 0.0, False)


def refusal(fabric: Fabric, machine: Machine | None = None) -> TwinError | None:
    """Why this machine cannot run the lab (None when it can)."""
    machine = machine or this_machine()
    here = {name: 0 if fabric.runs_here(name) else 1 for name in fabric.nodes}  # a split lab's share: its own
    estimate = idle.machine_estimates(fabric, here, 2)[0]
    if fits(estimate, machine):
        return None
    costs = []
    if estimate.cores > machine.cores:
        costs.append(f"{estimate.cores:.1f} cores at rest (BFD every {fabric.bfd_interval_ms} ms and BGP on "
                     f"{estimate.bfd_sessions} sessions) against this machine's {machine.cores}")
    if estimate.memory_mib > MEMORY_SHARE * machine.memory_mib:
        costs.append(f"{estimate.memory_mib / 1024:.1f} GiB for FRR on {estimate.switches} switches against "
                     f"{MEMORY_SHARE:.0%} of the {machine.memory_mib / 1024:.1f} GiB available")
    count, busiest, fitting = machines_needed(fabric, machine)
    lab = fabric.split_of or fabric.name  # a share's advice is about the whole lab
    ways = [f"split it: `twin plan {lab} --hosts {count}`, then on each machine K of {count} `twin lab up "
            f"{lab} --machines {count} --machine K --address A1,...,A{count}` (or `twin export {lab} "
            f"--hosts {count}` for containerlab)"
            if fitting else f"no split over {MAX_MACHINES} machines like this one fits it (the closest, {count} "
                            f"machines, takes {busiest:.1f} cores at rest on the busiest)"]
    if estimate.cores > machine.cores:
        ways.append(f"or lengthen routing.bfd.interval_ms to {idle.bfd_interval_that_fits(fabric, machine.cores / 2)}"
                    " (detection then takes interval x multiplier)")
    return TwinError(f"lab {fabric.name} is more than this machine runs: {'; '.join(costs)}",
                     hint="; ".join(ways))
