"""Every workload kind, in one list. A kind is its parameter schema, a factory
`(WorkloadContext, params, name) -> workload` with start() and stop() (and ready(timeout) if it
needs time to connect), a check `(params, fabric)` that raises ValueError for parameters that do
not fit the lab (run when the scenario loads, before anything starts), and a one-line summary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from pydantic import BaseModel

from twin.collectives.metrics import OPS
from twin.registry import Registry
from twin.workloads.collective import Collective, CollectiveParams, TrainParams, check_collective
from twin.workloads.flows import Flows, FlowsParams, check_flows
from twin.workloads.probes import Probes, ProbesParams, check_load


@dataclass(frozen=True)
class WorkloadKind:
    params: type[BaseModel]
    factory: Callable
    summary: str
    check: Callable = lambda params, fabric: None


WORKLOADS: Registry[WorkloadKind] = Registry("workload kind")
WORKLOADS.add("flows", WorkloadKind(FlowsParams, Flows, "steady UDP flows between host NICs: loss and delay",
                                    check_flows))
WORKLOADS.add("probes", WorkloadKind(ProbesParams, Probes, "the probe mesh: every path probed, loss and RTT per "
                                     "path (feeds the probe localizer)", check_load))
WORKLOADS.add("train", WorkloadKind(TrainParams, partial(Collective, op="train"), "a training-step loop: compute, "
                                    "then an allreduce of the gradients", check_collective))
for _op in OPS:
    WORKLOADS.add(_op, WorkloadKind(CollectiveParams, partial(Collective, op=_op), f"{_op} back to back, one rank "
                                    "per host NIC", check_collective))
