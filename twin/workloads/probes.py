"""kind: probes — the probe mesh as a scenario workload.

Each reporting interval becomes one `probe` event (totals and the lossy paths) and one line
of `probes.jsonl` in the results folder with every path's sample; route changes and BGP or BFD
transitions seen by the runner's monitor make the agents rediscover their paths.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from twin.model.nics import require_fabric_pairs
from twin.probes.focus import TIMES as FOCUS_TIMES
from twin.probes.mesh import PROBES_FILE, Interval, ProbeMesh
from twin.probes.pace import MIN_LINK_PPS, floor_per_interval
from twin.probes.selection import (
    MAX_PLANNED_PATHS,
    PATHS_PER_LINK,
    fewest_flows,
    most_paths,
    plan,
    plan_size_bound,
    probe_load,
)
from twin.workloads.base import WorkloadContext

REFRESH_SETTLE_S = 0.5  # rediscover once route changes have been quiet this long


class ProbesParams(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    interval_ms: int = Field(100, ge=10, le=10000, description="each path is probed once per interval (cover: more "
                                                               "often where min_link_pps asks)")
    pairs: Literal["cover", "rail", "full"] = Field(
        "cover", description="cover: flows chosen so every link direction is crossed by paths_per_link "
                             "probed paths (cost grows with links); rail: every same-rail NIC pair; full: every "
                             "NIC pair across hosts")
    paths_per_link: int = Field(PATHS_PER_LINK, ge=1, le=8,
                                description="cover: probed paths crossing each link direction; a link's probe "
                                            "rate is paths_per_link x 1000 / interval_ms per second")
    report_ms: int = Field(500, ge=100, le=10000, description="counting interval of the records")
    refresh_s: float = Field(30.0, ge=1, le=3600, description="periodic path rediscovery")
    max_pps: int = Field(5000, ge=1, le=100000, description="refuse a mesh that would send more probes/s")
    rtt_every: int = Field(1, ge=1, le=1000, description="echo one probe in this many for the round trip "
                                                        "(loss and one-way delay count them all); an echo is "
                                                        "a second packet across the fabric")
    min_link_pps: int = Field(MIN_LINK_PPS, ge=0, le=100000,
                              description="cover: flows over link directions that fewer probes cross are probed "
                                          "more than once an interval until every direction carries this many "
                                          "probes/s, or twice paths_per_link an interval if fewer; 0: never")
    focus: int = Field(FOCUS_TIMES, ge=1, le=16, description="cover: after a loss, the flows over that path's "
                                                            "links are probed this many times an interval for "
                                                            "2 s (a quarter of the flows at most, within "
                                                            "max_pps); 1: never")


class ProbeLoadError(ValueError):
    key = "interval_ms"

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


def _cheaper(params: ProbesParams, paced: bool = False) -> str:
    """What else lowers the load; `paced`: the load counts paced probes (probes/pace.py)."""
    if params.pairs == "cover":
        return "lower paths_per_link or min_link_pps" if paced else "lower paths_per_link"
    return "use pairs: cover (cost grows with links)"


def check_plan_size(fabric, pairs: str, paths_per_link: int) -> None:
    """Refuse a mesh whose plan would be too large to build, from the counts (before building it)."""
    bound = plan_size_bound(fabric, pairs, paths_per_link)
    if bound > MAX_PLANNED_PATHS:
        raise ProbeLoadError(f"the {pairs} mesh of this lab lists up to {bound:,} paths, more than a plan "
                             f"holds ({MAX_PLANNED_PATHS:,})", "use pairs: cover (every link probed; its cost "
                             "grows with the links, not the NIC pairs)")


# Planning walks every leaf pair's equal-cost paths: pod128 (16,384 pairs x 1,024 paths) takes 2 s
# here, AIPod (9,216 x 16,384) 40 s. A check builds the plan to weigh its exact load only below
# this much; above it, the counts' lower bound is what it weighs (issue 34: every check bounded).
MAX_CHECKED_PLANNING = 32_000_000


def planning_work(fabric) -> int:
    """Leaf pairs times the most equal-cost paths between two NICs: what building a plan walks."""
    return len(fabric.by_role("leaf")) ** 2 * most_paths(fabric)


def check_load(params: ProbesParams, fabric) -> None:
    require_fabric_pairs(fabric, "the probe mesh")
    least = fewest_flows(fabric, params.pairs, params.paths_per_link) * 1000 / params.interval_ms
    if least > params.max_pps:
        raise ProbeLoadError(f"the {params.pairs} mesh at interval_ms {params.interval_ms} sends at least "
                             f"{least:.0f} probes/s, over max_pps {params.max_pps}; raise interval_ms to "
                             f"{int(params.interval_ms * least / params.max_pps) + 1} or more, {_cheaper(params)}, "
                             "or raise max_pps")
    check_plan_size(fabric, params.pairs, params.paths_per_link)
    if planning_work(fabric) > MAX_CHECKED_PLANNING:
        return  # the lower bound above is what a check weighs; the mesh plans when it starts
    floor = floor_per_interval(params.min_link_pps, params.interval_ms, params.paths_per_link)
    plans = plan(fabric, params.pairs, k=params.paths_per_link, floor=floor)
    load = probe_load(plans, params.interval_ms, params.report_ms)
    if load["probes_per_s"] > params.max_pps:
        raise ProbeLoadError(f"the {params.pairs} mesh at interval_ms {params.interval_ms} sends "
                         f"{load['probes_per_s']:.0f} probes/s, over max_pps {params.max_pps}; raise interval_ms "
                         f"to {int(params.interval_ms * load['probes_per_s'] / params.max_pps) + 1} or more, "
                         f"{_cheaper(params, paced=any(p.paced for p in plans))}, or raise max_pps")


class Probes:
    def __init__(self, ctx: WorkloadContext, params: ProbesParams, name: str):
        self.ctx, self.params, self.name = ctx, params, name
        self.mesh = ProbeMesh(ctx.lab, f"{ctx.run_id}-{name}", params.pairs,
                              params.interval_ms, params.report_ms, params.refresh_s, ctx.seed,
                              paths_per_link=params.paths_per_link, rtt_every=params.rtt_every,
                              focus=params.focus, max_pps=params.max_pps, min_link_pps=params.min_link_pps)
        self.mesh.keep_logs = ctx.events.path.parent / "probe-agents"  # the results folder outlives the lab
        self._out = None
        self._last_route = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresher, name=f"probe-refresh-{name}", daemon=True)

    def start(self) -> None:
        self._out = open(self.ctx.events.path.parent / PROBES_FILE, "a", buffering=1)
        self.mesh.listeners.append(self._interval)
        self.mesh.path_listeners.append(lambda t: self.ctx.events.emit("probe_paths", workload=self.name,
                                                                       paths=len(self.mesh.paths)))
        # Routes, and the sessions that move them: a BGP session coming back up re-adds next hops
        # without always showing as a host-prefix route change in time, and probes charged to
        # the paths discovered before it blame links their packets no longer cross.
        for kind in ("route", "bgp", "bfd"):
            self.ctx.events.subscribe(kind, self._route_changed)
        self.ctx.events.emit("workload", op="start", workload=self.name, **self.mesh.load)
        self.mesh.start()
        self._thread.start()

    def ready(self, timeout_s: float) -> None:
        self.mesh.wait_for_paths(timeout_s)
        if self.mesh.selection is not None:
            self.ctx.events.emit("probe_selection", workload=self.name, **self.mesh.selected())

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        stats = self.mesh.stop()
        focus = self.mesh.focus
        self.ctx.events.emit("workload", op="stop", workload=self.name, agents=stats, late_rows=self.mesh.late_rows,
                             mesh_lag=self.mesh.lag,
                             focus={"times": focus.times, "flows_at_most": focus.budget, "triggers": focus.triggers}
                             if focus else None)
        if self._out:
            self._out.close()

    def _route_changed(self, _record: dict) -> None:
        self._last_route = time.monotonic()
        self.mesh.transitions.changed(self._last_route)

    def _refresher(self) -> None:
        while not self._stop.wait(0.1):
            if self._last_route is not None and time.monotonic() - self._last_route > REFRESH_SETTLE_S:
                self._last_route = None
                self.mesh.refresh_paths()

    def _interval(self, interval: Interval) -> None:
        t = interval.t - self.ctx.events.t0
        lossy = [s for s in interval.samples if s.lost]
        sent = sum(s.sent for s in interval.samples)
        lost = sum(s.lost for s in interval.samples)
        held = sum(s.held for s in interval.samples)
        # vars(), not asdict(): asdict deep-copies every field, a third of the follower's time at 1000 paths.
        self._out.write(json.dumps({"t": round(t, 3), "samples": [vars(s) for s in interval.samples]}) + "\n")
        self.ctx.events.emit("probe", t=t, span_s=self.params.report_ms / 1000, workload=self.name,
                             paths=len(interval.samples), sent=sent, lost=lost, held=held,
                             unreported=sum(s.unreported for s in interval.samples),
                             rerouting=any(s.rerouting for s in interval.samples),
                             loss_pct=round(100.0 * lost / sent, 3) if sent else None,
                             lossy=[f"{s.src} -> {s.dst} :{s.sport}" for s in lossy[:10]])
