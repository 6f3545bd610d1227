"""Workload kinds register by name; a scenario naming another kind lists the valid ones.

The collective kinds of the contract (allreduce, allgather, reducescatter, alltoall,
broadcast, train) and probes arrive with the workloads issue; until then a scenario
that names them gets an error listing what exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from .flows import Flows, FlowsParams


@dataclass(frozen=True)
class WorkloadKind:
    params: type[BaseModel]
    factory: type


WORKLOAD_KINDS: dict[str, WorkloadKind] = {"flows": WorkloadKind(FlowsParams, Flows)}
