"""The report of a run, typed: what report.json holds and every reader (the CLI, the drill, junit,
the HTML page, the timeline) reads. Computed from a results folder by results/analysis.py."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from twin.results.record import FaultTiming

SCHEDULE_TOLERANCE_S = 0.05  # a fault applied this close to its time is on schedule


class FlowStats(BaseModel):
    intervals: int = 0
    sent: int = 0
    received: int = 0
    loss_pct: float | None = None
    max_delay_ms: float | None = None


class FaultWindow(FaultTiming):
    """One fault: when it was planned and applied, and what routing and the flows did meanwhile."""
    schedule_error_s: float | None = None
    on_schedule: bool = False
    flows: FlowStats = FlowStats()
    flows_recovered_after_s: float | None = None
    route_changes: int = 0
    first_route_change_s: float | None = None
    last_route_change_s: float | None = None
    restore_route_changes: int = 0
    restored_after_s: float | None = None
    bgp_downs: int = 0
    bfd_downs: int = 0
    first_bfd_down_s: float | None = None
    # probed flows whose path crossed its link (or a link of its node) while it was on; None: no
    # probes ran. 0: the probe detectors could not see it (results/probe_cover.py)
    probed_paths: int | None = None

    def active(self, duration_s: float) -> tuple[float, float]:
        """From the start of its apply to its clear (or the end of the run)."""
        start = self.applied_s if self.applied_s is not None else self.scheduled_s
        return start, self.cleared_s if self.cleared_s is not None else duration_s

    def onset(self, duration_s: float) -> float:
        """When the fault is in full effect: the end of its apply (a kind whose apply takes a while
        acts only at its end)."""
        return self.active(duration_s)[0] + (self.apply_took_s or 0.0)


class CollectiveSummary(BaseModel):
    transport: str = "tcp"
    transport_totals: dict[str, int] | None = None  # roce: what the transport resent, over the run
    baseline: dict[str, Any] = {}
    fault_windows: list[dict[str, Any]] = []
    hangs: int = 0
    hang_events: list[dict[str, Any]] = []
    first_hang_s: float | None = None
    recovered_s: float | None = None
    rank_exits: list[dict[str, Any]] = []  # a fault crashed a rank (restarted: false), the launcher restarted it (true)
    wrong: int = 0


class DetectorScore(BaseModel):
    verdicts: int
    right: int
    wrong: int
    precision: float | None
    recall: float | None
    detect_s: dict[str, float]
    after_end: int = 0  # verdicts received after the scenario ended: not graded
    # faults only localized to a set: fault id -> candidates in its smallest right set verdict
    candidates: dict[str, int] = {}

    def detected(self) -> str:
        """The faults it found and when, and those it could only localize to a set."""
        return ", ".join(f"{k} after {v} s" + (f" (localized to {self.candidates[k]} candidates)"
                                                if k in self.candidates else "")
                         for k, v in self.detect_s.items()) or "nothing"


class Graded(BaseModel):
    expect: dict[str, Any]
    kind: str
    status: str  # pass | fail
    measured: Any = None
    limit: Any = None
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


class Report(BaseModel):
    scenario: str
    scenario_file: str = ""
    lab: str = ""
    seed: int = 1
    started_utc: str = ""
    duration_s: float
    interrupted: bool | None = False
    machine: str = ""
    baseline_flows: FlowStats = FlowStats()
    faults: list[FaultWindow] = []
    collectives: dict[str, CollectiveSummary] = {}
    probes: dict[str, Any] = {}
    telemetry: dict[str, Any] | None = None
    mitigation: dict[str, Any] | None = None
    fabric: dict[str, Any] | None = None
    balance: dict[str, Any] | None = None  # per tier: MMR and Jain's index of busy ECMP groups (balance.py)
    expectations: list[Graded] = []
    detectors: dict[str, DetectorScore] = {}
    passed: bool = False
    transport_note: str = ""
    fabric_note: str = ""
    damaged: list[str] = []  # what of the results folder could not be read back (a crash cut it)

    def to_json(self) -> str:
        return self.model_dump_json(indent=1)
