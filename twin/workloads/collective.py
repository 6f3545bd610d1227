"""kind: allreduce | allgather | reducescatter | alltoall | broadcast | train — real gloo
collectives running for the whole scenario, one rank per host NIC.

The collective kinds repeat the operation back to back; `train` is a training-step loop:
`compute_ms` of simulated compute (sleep), then an allreduce of a gradient-sized tensor.
Every rank's every iteration becomes a `collective` event; a collective that does not
finish within `timeout_s` becomes a `hang` event, followed by `recovered` once the ranks
have re-created their process group.
"""

from __future__ import annotations

import threading
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..collectives.groups import ring_order, select_nics
from ..collectives.launcher import Job, JobSpec
from ..collectives.metrics import aligned_size, bus_factor
from ..errors import TwinError
from ..units import parse_size_bytes
from .base import WorkloadContext

POLL_S = 0.2


class CollectiveParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    size: str = Field("8MiB", description="bytes per rank (total over ranks for allgather/reducescatter)")
    ranks: str | list[str] = Field("all", description="all | rail:N | hosts:H1,H2 | list of host:nic")
    order: Literal["naive", "topo"] = Field("topo", description="ring order of the ranks")
    channels: int = Field(1, ge=1, le=8, description="connections per rank pair")
    timeout_s: float = Field(10.0, gt=0, le=600, description="a collective taking longer is a hang")

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        parse_size_bytes(value)
        return value


class TrainParams(CollectiveParams):
    size: str = Field("4MiB", description="gradient bytes allreduced every step")
    compute_ms: float = Field(200.0, ge=0, le=60000, description="simulated compute per step")


def check_ranks(params: CollectiveParams, fabric) -> None:
    select_nics(fabric, params.ranks)  # RankSpecError is a ValueError naming the bad part


class Collective:
    def __init__(self, ctx: WorkloadContext, params: CollectiveParams, name: str, op: str):
        self.ctx, self.params, self.name = ctx, params, name
        nics = ring_order(select_nics(ctx.fabric, params.ranks), params.order)
        self.world = len(nics)
        self.op = "allreduce" if op == "train" else op
        self.spec = JobSpec(name=f"{ctx.run_id}-{name}", ops=[self.op], nics=nics, mode="loop",
                            sizes=[aligned_size(parse_size_bytes(params.size), self.world * params.channels)],
                            channels=params.channels, timeout_s=params.timeout_s,
                            compute_ms=getattr(params, "compute_ms", 0.0), duration_s=24 * 3600)
        self.job = Job(self.spec, ctx.state, ctx.runtime)
        self.connected = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"collective-{name}", daemon=True)

    def start(self) -> None:
        self.job.start()
        self.ctx.events.emit("workload", op="start", workload=self.name, op_kind=self.op, world=self.world,
                             ranks=[n.label for n in self.spec.nics], size=self.spec.sizes[0])
        self._thread.start()

    def ready(self, timeout_s: float) -> None:
        """Until every rank has joined the process group (starting torch takes seconds a rank)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.connected >= self.world:
                return
            problem = self.job.failure()
            if problem:
                raise TwinError(f"workload {self.name}: {problem}", hint=f"rank logs: {self.job.directory}")
            time.sleep(0.1)
        raise TwinError(f"workload {self.name}: {self.connected} of {self.world} ranks connected "
                        f"within {timeout_s:.0f} s", hint=f"rank logs: {self.job.directory}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.job.stop(grace_s=3.0)
        self._publish()

    def _follow(self) -> None:
        while not self._stop.wait(POLL_S):
            self._publish()
            problem = self.job.failure()
            if problem:
                self.ctx.events.emit("workload", op="failed", workload=self.name, error=problem)
                return

    def _publish(self) -> None:
        factor = bus_factor(self.op, self.world)
        events = self.ctx.events
        for record in self.job.read():
            kind = record.get("event")
            t = record["t"] - events.t0 if "t" in record else None
            nic = self.spec.nics[record["rank"]].label
            if kind == "iter":
                busbw = record["size"] / record["comm_s"] * factor if record["comm_s"] > 0 else 0.0
                events.emit("collective", t=t, workload=self.name, rank=record["rank"], nic=nic,
                            iter=record["iter"], step_s=record["step_s"], comm_s=record["comm_s"],
                            busbw_Bps=round(busbw), gen=record["gen"], wrong=record["wrong"])
            elif kind in ("hang", "recovered", "connected", "rejoin_failed"):
                if kind == "connected" and record["gen"] == 0:
                    self.connected += 1
                events.emit(kind if kind != "connected" else "rank_connected", t=t, workload=self.name,
                            rank=record["rank"], nic=nic, gen=record["gen"],
                            **{k: v for k, v in record.items() if k in ("waited_s", "took_s", "error", "cause", "iter")})
