"""What the faults outside the network share: the training ranks a host runs (the lab's own
records of its collective jobs) and each rank's control file (collectives/control.py: the worker reads it
before every step)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from twin.errors import TwinError
from twin.faults.base import FaultContext, OnNode, Params
from twin.model.nics import fabric_nics
from twin.model.targets import TargetError, resolve_node

RANK_RESOURCE = re.compile(r"^job/(?P<job>[^/]+)/rank(?P<rank>\d+)$")


@dataclass(frozen=True)
class RankOf:
    job: str
    rank: int
    nic: str  # host:nic label
    control: Path  # the rank's control file
    compute_ms: float  # the job's compute per step (0: collectives back to back)


def check_nic(fabric, params) -> str:
    """The host (and NIC, if named) exists: checked when the scenario loads."""
    host = resolve_node(fabric, params.node, roles=("host",))
    nics = [nic.ifname for nic in fabric_nics(fabric) if nic.host == host]
    if params.nic is not None and params.nic not in nics:
        raise TargetError(f"{host} has no NIC '{params.nic}'", hint="NICs: " + ", ".join(nics), key="nic")
    return host


def ranks_on(lab, host: str, nic: str | None) -> list[RankOf]:
    """The ranks of the lab's running collective jobs bound to `host` (to its NIC `nic` if given)."""
    found = []
    for resource in lab.state.resources:
        match = RANK_RESOURCE.match(resource.name) if resource.kind == "worker" else None
        if match is None or resource.node != host:
            continue
        directory = lab.paths.jobs / match["job"]
        try:
            job = json.loads((directory / "job.json").read_text())
            nics = job["nics"]
        except (OSError, ValueError, KeyError):
            continue  # a job that ended under us
        rank = int(match["rank"])
        label = f"{nics[rank]['host']}:{nics[rank]['ifname']}"
        if nic is None or nics[rank]["ifname"] == nic:
            found.append(RankOf(match["job"], rank, label, directory / f"rank-{rank}.control",
                                float(job.get("compute_ms", 0.0))))
    if not found:
        where = f"{host}:{nic}" if nic else host
        raise TwinError(f"no rank of a collective job runs on {where}",
                        hint="the fault needs a training job there: a workload such as `kind: train` or "
                             "`kind: allreduce` with ranks on that host")
    return found


def ask(ranks: list[RankOf], request: dict) -> None:
    """Write each rank's control file (replaced whole, so a rank never reads half of one)."""
    for rank in ranks:
        scratch = rank.control.with_suffix(".tmp")
        scratch.write_text(json.dumps(request))
        scratch.replace(rank.control)


def release(controls: list[str]) -> None:
    """Remove the control files a fault wrote: the ranks run as before."""
    for path in controls:
        Path(path).unlink(missing_ok=True)


class RankParams(Params):
    node: str = Field(description="the host whose training rank the fault hits")
    nic: str | None = Field(None, description="the rank bound to this NIC (e.g. nic2); omitted = every rank "
                                              "of the host")


class OnRanks(OnNode):
    """A fault outside the network: what it asks of the host's ranks (`request`), written to their
    control files, which clearing removes."""

    roles = ("host",)
    training_level = 5  # not the network: the job's timeouts and slow steps point at it all the same
    # the workload kinds whose ranks it can act on; None: any collective (a scenario's check)
    workload_kinds: ClassVar[frozenset[str] | None] = None

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        host, end = rng.choice(sorted(fabric.host_nics(), key=lambda pair: (pair[0], pair[1].ifname)))
        return {"node": host, "nic": end.ifname}

    def request(self, fault_id: str, params) -> dict:
        raise NotImplementedError

    def chosen(self, ranks: list[RankOf], params) -> list[RankOf]:
        """The ranks the fault can act on (all, unless the kind needs something of them)."""
        return ranks

    def targets(self, fabric, params):
        check_nic(fabric, params)
        return super().targets(fabric, params)

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        ranks = self.chosen(ranks_on(ctx.lab, params.node, params.nic), params)
        record.update(ranks=[r.nic for r in ranks], controls=[str(r.control) for r in ranks])
        ask(ranks, self.request(fault_id, params))

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        release(record.get("controls", []))
