"""Workload kinds register by name; a scenario naming another kind lists the valid ones.

A kind is its parameter schema, a factory `(WorkloadContext, params, name) -> workload`
with start() and stop(), and a check `(params, fabric)` that raises ValueError for
parameters that do not fit the lab (run when the scenario is loaded, before anything starts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from pydantic import BaseModel

from twin.collectives.metrics import OPS
from twin.workloads.base import WorkloadContext
from twin.workloads.collective import Collective, CollectiveParams, TrainParams, check_ranks
from twin.workloads.flows import Flows, FlowsParams
from twin.workloads.probes import Probes, ProbesParams, check_load


@dataclass(frozen=True)
class WorkloadKind:
    params: type[BaseModel]
    factory: Callable
    check: Callable = lambda params, fabric: None


WORKLOAD_KINDS: dict[str, WorkloadKind] = {
    "flows": WorkloadKind(FlowsParams, Flows),
    "probes": WorkloadKind(ProbesParams, Probes, check_load),
    "train": WorkloadKind(TrainParams, partial(Collective, op="train"), check_ranks),
    **{op: WorkloadKind(CollectiveParams, partial(Collective, op=op), check_ranks) for op in OPS},
}

__all__ = ["WORKLOAD_KINDS", "WorkloadContext", "WorkloadKind"]
