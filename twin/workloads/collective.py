"""kind: allreduce | allgather | reducescatter | alltoall | broadcast | train — real torch
collectives running for the whole scenario, one rank per host NIC: gloo over TCP, or the
emulated RoCE transport (`transport: roce`, twin/roce) with NCCL's timers.

The collective kinds repeat the operation back to back; `train` is a training-step loop:
`compute_ms` of simulated compute (sleep), then an allreduce of a gradient-sized tensor.
Every rank's every iteration becomes a `collective` event; a collective that does not
finish within `timeout_s` becomes a `hang` event, followed by `recovered` once the ranks
have re-created their process group.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from twin.collectives.groups import ring_order, select_nics
from twin.collectives.launcher import Job, JobSpec
from twin.collectives.metrics import ELEMENT_BYTES, aligned_size, bus_factor
from twin.errors import TwinError
from twin.model import pathhash
from twin.model.nics import switches_between
from twin.procs import INSTRUMENT_NICE, set_priority
from twin.roce.qp import DEFAULT_IB_TIMEOUT, DEFAULT_RETRY_CNT
from twin.roce.qp import REPORTED_FIELDS as TRANSPORT_FIELDS
from twin.units import parse_size_bytes
from twin.workloads.base import WorkloadContext

POLL_S = 0.2


ROCE_KEYS = ("ib_timeout", "retry_cnt", "qps_per_connection", "time_scale", "cc", "multipath", "dodge")


class CollectiveParams(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    size: str = Field("8MiB", description="bytes per rank (total over ranks for allgather/reducescatter)")
    ranks: str | list[str] = Field("all", description="all | rail:N | hosts:H1,H2 | list of host:nic")
    order: Literal["naive", "topo"] = Field("topo", description="ring order of the ranks")
    channels: int = Field(1, ge=1, le=8, description="process groups, each with its own connections")
    timeout_s: float = Field(10.0, gt=0, le=600, description="a collective taking longer is a hang")
    transport: Literal["tcp", "roce"] = Field("tcp", description="tcp: gloo over TCP (the real library); "
                                              "roce: RoCE's RC transport emulated over UDP (go-back-N)")
    ib_timeout: int = Field(DEFAULT_IB_TIMEOUT, ge=0, le=31,
                            description="roce: NCCL_IB_TIMEOUT, first retransmission timeout 4.096 us x 2^n")
    retry_cnt: int = Field(DEFAULT_RETRY_CNT, ge=0, le=7, description="roce: NCCL_IB_RETRY_CNT, retries before "
                                                                      "the QP fails")
    qps_per_connection: int = Field(1, ge=1, le=8, description="roce: NCCL_IB_QPS_PER_CONNECTION, QPs per rank "
                                                               "pair (each its own ECMP path)")
    time_scale: float = Field(1.0, gt=0, le=1e6, description="roce: multiplies the transport's timers")
    cc: Literal["dcqcn", "none"] = Field("dcqcn", description="roce: congestion control; dcqcn: packets are "
                                         "ECN-capable, a CE mark comes back as a CNP that cuts the QP's rate "
                                         "(twin/roce/dcqcn.py); none: line rate always, PFC alone holds it")
    multipath: bool | Literal["rc"] = Field(
        False, description="roce: true: packets marked reorderable (a lab with routing.load_balance flowlet or "
                           "packet spreads them over its uplinks), sprayed by the NIC over 16 source ports "
                           "(which an ECMP lab's hash spreads) and selective repeat instead of go-back-N "
                           "(twin/roce/selective.py); rc: marked reorderable, the QPs still RC (go-back-N), as a NIC "
                           "without out-of-order placement on an adaptive fabric, for comparison")
    dodge: Literal[False, "offset"] = Field(
        False, description="roce: offset: a QP that loses packets, or whose ACKs go missing, moves to the next "
                           "path offset (Xingmai's hash dodging, per QP: a path sharing no spine or superspine "
                           "with its old one; a lab with routing.hash_offset)")

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        parse_size_bytes(value)
        return value

    @model_validator(mode="after")
    def _roce_keys_need_roce(self):
        if self.transport != "roce":
            set_here = sorted(k for k in ROCE_KEYS if k in self.model_fields_set)
            if set_here:
                raise ValueError(f"{', '.join(set_here)} apply to transport: roce (this collective runs on tcp)")
        if self.dodge and self.multipath is True:
            raise ValueError("dodge: offset moves a QP's one path, and multipath: true sprays every QP over all "
                             "of them already (use one of the two; multipath: rc QPs may dodge)")
        return self

    def roce(self, mtu: int, line_bps: int) -> dict:
        return {"ib_timeout": self.ib_timeout, "retry_cnt": self.retry_cnt,
                "qps_per_connection": self.qps_per_connection, "time_scale": self.time_scale, "mtu": mtu,
                "cc": self.cc, "line_bps": line_bps, "multipath": self.multipath,
                "path_offsets": pathhash.OFFSET_MASK + 1 if self.dodge else 0}


class TrainParams(CollectiveParams):
    size: str = Field("4MiB", description="gradient bytes allreduced every step")
    compute_ms: float = Field(200.0, ge=0, le=60000, description="simulated compute per step")


class SizeError(ValueError):
    key = "size"

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


# Every rank holds its tensor, the received chunk and torch's working copies (about 3x `size`);
# all ranks share this machine's memory, so the sum is what must fit (with room for the lab).
RANK_COPIES = 3
MEMORY_SHARE = 0.5


class DodgeError(ValueError):
    key = "dodge"
    hint = "set `routing.hash_offset: true` in the lab file (labs/rail4-ar.yaml does), or leave dodge out"


def check_collective(params: CollectiveParams, fabric) -> None:
    """What a collective asks of the lab: its ranks and size, and for dodging, path offsets."""
    check_ranks(params, fabric)
    if params.dodge == "offset" and not fabric.hash_offset:
        raise DodgeError(f"dodge: offset moves a QP by its path offset, and lab {fabric.name} hashes with the "
                         "kernel's ECMP, whose paths no host can choose")


def check_ranks(params: CollectiveParams, fabric) -> None:
    nics = select_nics(fabric, params.ranks)  # RankSpecError is a ValueError naming the bad part
    size, world = parse_size_bytes(params.size), len(nics) * params.channels
    if size < ELEMENT_BYTES * world:
        raise SizeError(f"size {params.size} is less than one {ELEMENT_BYTES}-byte element per rank and channel "
                        f"({world}): there is nothing to reduce", f"at least {ELEMENT_BYTES * world} B, e.g. 8MiB")
    need, have = size * RANK_COPIES * len(nics), physical_memory()
    if need > have * MEMORY_SHARE:
        raise SizeError(f"size {params.size} on {len(nics)} ranks needs about {need / 2**30:.1f} GiB "
                        f"({RANK_COPIES} copies a rank), over half of this machine's {have / 2**30:.1f} GiB",
                        "a smaller size (the twin scales rates down; sizes of 1-64 MiB show the same shape)")


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class Collective:
    def __init__(self, ctx: WorkloadContext, params: CollectiveParams, name: str, op: str):
        self.ctx, self.params, self.name = ctx, params, name
        nics = ring_order(select_nics(ctx.lab.fabric, params.ranks), params.order)
        self.world = len(nics)
        self.op = "allreduce" if op == "train" else op
        self.spec = JobSpec(name=f"{ctx.run_id}-{name}", ops=[self.op], nics=nics, mode="loop",
                            sizes=[aligned_size(parse_size_bytes(params.size), self.world * params.channels)],
                            channels=params.channels, timeout_s=params.timeout_s,
                            compute_ms=getattr(params, "compute_ms", 0.0), duration_s=24 * 3600,
                            transport=params.transport, roce=params.roce(ctx.lab.fabric.mtu, ctx.lab.fabric.rate_bps),
                            switches=switches_between(ctx.lab.fabric, nics))
        self.job = Job(self.spec, ctx.lab)
        self.connected = 0
        # Built-in detectors that read the ranks' own records (rank-health): called with each record
        # and its rank's NIC label, from the thread that follows the job.
        self.listeners: list[Callable[[dict, str], None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"collective-{name}", daemon=True)

    def start(self) -> None:
        self.job.start()
        self.ctx.events.emit("workload", op="start", workload=self.name, op_kind=self.op, world=self.world,
                             ranks=[n.label for n in self.spec.nics], size=self.spec.sizes[0],
                             transport=self.params.transport,
                             **({"roce": self.spec.roce} if self.params.transport == "roce" else {}))
        self._thread.start()

    def ready(self, timeout_s: float) -> None:
        """Until every rank has joined the process group (a container's rank imports torch: seconds each)."""
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
        # The ranks' records feed detectors (rank-health, transport-state): read ahead of the load,
        # as the probe agents run (at the default, 16 ranks on rail4 delayed them by 0.6 s median)
        set_priority(INSTRUMENT_NICE)
        while not self._stop.wait(POLL_S):
            self._publish()
            self._supervise()
            problem = self.job.failure()
            if problem:
                self.ctx.events.emit("workload", op="failed", workload=self.name, error=problem)
                return

    def _supervise(self) -> None:
        """A rank a fault crashed, and its restart once the fault is cleared: recorded as events, and
        told to the listeners as the job's launcher sees them (`exited`, `restarted`)."""
        for what, rank in self.job.supervise():
            now = time.monotonic()
            nic = self.spec.nics[rank].label
            record = {"event": "exited" if what == "crashed" else "restarted", "rank": rank, "t": now}
            for listener in self.listeners:
                listener(record, nic)
            self.ctx.events.emit(f"rank_{what}", workload=self.name, rank=rank, nic=nic)

    def _publish(self) -> None:
        factor = bus_factor(self.op, self.world)
        events = self.ctx.events
        for record in self.job.read():
            kind = record.get("event")
            t = record["t"] - events.t0 if "t" in record else None
            nic = self.spec.nics[record["rank"]].label
            for listener in self.listeners:
                listener(record, nic)
            if kind == "iter":
                busbw = record["size"] / record["comm_s"] * factor if record["comm_s"] > 0 else 0.0
                events.emit("collective", t=t, workload=self.name, rank=record["rank"], nic=nic,
                            iter=record["iter"], step_s=record["step_s"], comm_s=record["comm_s"],
                            busbw_Bps=round(busbw), gen=record["gen"], wrong=record["wrong"],
                            **{k: record[k] for k in (*TRANSPORT_FIELDS, "rate_share") if k in record})
            elif kind in ("hang", "recovered", "connected", "rejoin_failed"):
                if kind == "connected" and record["gen"] == 0:
                    self.connected += 1
                events.emit(kind if kind != "connected" else "rank_connected", t=t, workload=self.name,
                            rank=record["rank"], nic=nic, gen=record["gen"],
                            **{k: v for k, v in record.items()
                               if k in ("waited_s", "took_s", "error", "cause", "iter", *TRANSPORT_FIELDS)})
