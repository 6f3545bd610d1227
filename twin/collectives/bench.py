"""`twin bench collective`: an nccl-tests-style sweep on a running lab, with the bytes that
crossed the spine and superspine tiers (interface counters) and per-core CPU use."""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass

from twin.collectives.cpu import CpuMeter
from twin.collectives.groups import ring_hops_through_spines, ring_order, select_nics
from twin.collectives.launcher import Job, JobSpec, run_to_end
from twin.collectives.metrics import Measurement, aligned_size
from twin.lab.handle import Lab
from twin.lab.ports.counters import CounterReader, tier_rx_bytes
from twin.model.nics import switches_between
from twin.progress import NullProgress, Progress
from twin.roce.qp import REPORTED_FIELDS

_job_numbers = itertools.count()


@dataclass
class BenchResult:
    op: str
    ranks: list[str]  # host:nic labels in rank (ring) order
    order: str
    channels: int
    rate_bps: int
    measurements: list[Measurement]
    spine_bytes: int
    superspine_bytes: int
    ring_hops_crossing_spines: int
    cpu_busy_pct: list[float]  # per core, from all ranks connected to the last result
    elapsed_s: float
    transport: str = "tcp"

    def as_dict(self) -> dict:
        return {"op": self.op, "transport": self.transport, "ranks": self.ranks, "order": self.order,
                "channels": self.channels,
                "rate_bps": self.rate_bps, "spine_bytes": self.spine_bytes,
                "superspine_bytes": self.superspine_bytes,
                "ring_hops_crossing_spines": self.ring_hops_crossing_spines,
                "cpu_busy_pct": self.cpu_busy_pct, "elapsed_s": round(self.elapsed_s, 2),
                "results": [{"op": m.op, "size": m.size, "count": m.count, "type": "float", "time_s": m.time_s,
                             "algbw_Bps": m.algbw, "busbw_Bps": m.busbw,
                             "busbw_line_fraction": m.line_fraction(self.rate_bps), "wrong": m.wrong,
                             **m.transport}
                            for m in self.measurements]}


def run_bench(lab: Lab, op: str | list[str], sizes: list[int],
              ranks: str | list[str] = "all", order: str = "topo", channels: int = 1, iters: int = 5,
              warmup: int = 1, timeout_s: float = 60.0, progress: Progress | None = None,
              transport: str = "tcp", roce: dict | None = None) -> BenchResult:
    """roce: the transport's settings (ib_timeout, retry_cnt, qps_per_connection, time_scale, cc)."""
    progress = progress or NullProgress()
    fabric = lab.fabric
    ops = [op] if isinstance(op, str) else list(op)
    op = ",".join(ops)
    nics = ring_order(select_nics(fabric, ranks), order)
    world = len(nics)
    sizes = sorted({aligned_size(size, world * channels) for size in sizes})
    spec = JobSpec(name=f"bench-{ops[0]}-{os.getpid()}-{next(_job_numbers)}", ops=ops, nics=nics, sizes=sizes,
                   mode="bench",
                   iters=iters, warmup=warmup, channels=channels, timeout_s=timeout_s, transport=transport,
                   roce={"cc": "dcqcn", **(roce or {}), "mtu": fabric.mtu, "line_bps": fabric.rate_bps},
                   switches=switches_between(fabric, nics))
    progress.phase(f"{op} over {world} ranks", len(sizes) * len(ops))
    measurements: list[Measurement] = []

    connected = 0
    cpu: CpuMeter | None = None

    def on_record(record: dict) -> None:
        nonlocal connected, cpu
        if record.get("event") == "connected":
            connected += 1
            if connected == world:  # CPU is measured from here: start-up (torch import) excluded
                cpu = CpuMeter()
        if record.get("event") == "result":
            measurements.append(Measurement(record["op"], record["size"], world, record["time_s"], record["wrong"],
                                            {k: record[k] for k in REPORTED_FIELDS if k in record}))
            progress.advance()

    # Worst case per size: iterations at a tenth of line rate, plus start-up.
    budget = 120 + len(ops) * sum((iters + warmup) * 10 * size * 8 * 2 / fabric.rate_bps for size in sizes)
    with CounterReader(lab, [s.name for s in fabric.switches if s.role != "leaf"]) as reader:
        before, started = reader.read(checksums=False), time.monotonic()
        run_to_end(Job(spec, lab), budget, on_record)
        after = reader.read(checksums=False)
    busy = cpu.busy_pct() if cpu else []
    return BenchResult(op, [n.label for n in nics], order, channels, fabric.rate_bps, measurements,
                       tier_rx_bytes(before, after, fabric, "spine"),
                       tier_rx_bytes(before, after, fabric, "superspine"),
                       ring_hops_through_spines(nics), busy, time.monotonic() - started, transport)
