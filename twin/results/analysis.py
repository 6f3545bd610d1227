"""The analysis of a run: a pure function of its results folder (results/record.py) returning the
typed report. Every figure it states is measured from the recorded events; nothing here runs or
reads anything else, so a report can be rebuilt at any time (`twin report DIR`)."""

from __future__ import annotations

from twin.probes.selection import REPORT_MS
from twin.results import probe_cover, workloads
from twin.results.balance import load_balance
from twin.results.expectations import Expectation, grade
from twin.results.grading import detectors
from twin.results.record import FaultTiming, RunFolder
from twin.results.report import SCHEDULE_TOLERANCE_S, FaultWindow, FlowStats, Graded, Report
from twin.workloads.flows import WARMUP_S

PROBE_SPAN_S = REPORT_MS / 1000  # a run recorded before probe records carried their span
RESTORE_WINDOW_S = 10.0  # route changes this long after a clear count as its restoration
TRANSPORT_NOTE = ("flows and probes are UDP; collectives say their transport: tcp is gloo over TCP (selective "
                  "retransmission: loss costs little), roce the emulated RoCE RC transport (go-back-N, NCCL's "
                  "timers; user space over UDP, this kernel has no RDMA)")
LOSSLESS_NOTE = "lossless: a full queue pauses its senders (PFC emulated on the kernel's queues)"
LOSSY_NOTE = "lossy (links.pfc: false): a full queue drops"


def _window(timing: FaultTiming, duration_s: float) -> tuple[float, float]:
    start = timing.applied_s if timing.applied_s is not None else timing.scheduled_s
    end = timing.cleared_s if timing.cleared_s is not None else duration_s
    return start, end


def _overlaps(record: dict, start: float, end: float) -> bool:
    """An interval record [t, t + span_s) overlaps [start, end)."""
    return record["t"] + record.get("span_s", 0.0) > start and record["t"] < end


def _flow_stats(records: list[dict], start: float, end: float) -> FlowStats:
    inside = [r for r in records if _overlaps(r, start, end)]
    sent = sum(r["sent"] for r in inside)
    received = sum(r["received"] for r in inside)
    return FlowStats(intervals=len(inside), sent=sent, received=received,
                     loss_pct=round(100.0 * (sent - received) / sent, 3) if sent else None,
                     max_delay_ms=max((r["max_delay_ms"] for r in inside), default=None))


def _recovered_after(records: list[dict], start: float, end: float) -> float | None:
    """Seconds from onset to the start of the last loss-free stretch inside the window."""
    by_t: dict[float, list[dict]] = {}
    for r in records:
        if _overlaps(r, start, end):
            by_t.setdefault(r["t"], []).append(r)
    lossy = [t for t, rows in by_t.items() if any(r["loss_pct"] > 0 for r in rows)]
    if not lossy:
        return 0.0
    later = [t for t in sorted(by_t) if t > max(lossy)]
    return round(later[0] - start, 3) if later else None


def _engine_free(timings: list[FaultTiming]) -> dict[str, float]:
    """When the fault engine could start each fault: faults due at one moment are applied one
    after another, so a later one's schedule counts from the end of the apply before it."""
    free, out = float("-inf"), {}
    for timing in sorted((t for t in timings if t.applied_s is not None), key=lambda t: t.applied_s):
        out[timing.id] = max(timing.scheduled_s, free)
        free = timing.applied_s + (timing.apply_took_s or 0.0)
    return out


def _fault_window(timing: FaultTiming, records: list[dict], flows: list[dict], duration_s: float,
                  free_s: float | None = None) -> FaultWindow:
    start, end = _window(timing, duration_s)
    routing = [r for r in records if r["kind"] in ("route", "bgp", "bfd") and start <= r["t"] < end]
    routes = [r for r in routing if r["kind"] == "route"]
    restores = [r for r in records if r["kind"] == "route" and end <= r["t"] <= end + RESTORE_WINDOW_S]
    error_s = None if timing.applied_s is None else round(timing.applied_s - timing.scheduled_s, 4)
    late_s = None if timing.applied_s is None else timing.applied_s - max(timing.scheduled_s, free_s or float("-inf"))
    return FaultWindow(
        **timing.model_dump(), schedule_error_s=error_s,
        on_schedule=late_s is not None and abs(late_s) <= SCHEDULE_TOLERANCE_S and timing.error is None,
        flows=_flow_stats(flows, start, end),
        flows_recovered_after_s=_recovered_after(flows, start, end) if flows else None,
        route_changes=len(routes),
        first_route_change_s=round(routes[0]["t"] - start, 3) if routes else None,
        last_route_change_s=round(routes[-1]["t"] - start, 3) if routes else None,
        restore_route_changes=len(restores),
        restored_after_s=round(restores[-1]["t"] - end, 3) if restores else None,
        bgp_downs=sum(1 for r in routing if r["kind"] == "bgp" and r["state"] == "down"),
        bfd_downs=sum(1 for r in routing if r["kind"] == "bfd" and r["state"] == "down"),
        first_bfd_down_s=next((round(r["t"] - start, 3) for r in routing
                               if r["kind"] == "bfd" and r["state"] == "down"), None))


def recovered_by(end: float, fault: FaultWindow) -> float:
    """When a fault's traffic is healthy again: SETTLE_S after its clear, or SETTLE_S / 2 after the
    last route change its clear made (within RESTORE_WINDOW_S), whichever is later. A switch
    brought back restarts FRR and BGP re-converges for seconds; the traffic lost meanwhile is the
    fault's, not the healthy baseline's."""
    return end + max(workloads.SETTLE_S, (fault.restored_after_s or 0.0) + workloads.SETTLE_S / 2)


def _probe_span_s(records: list[dict]) -> float:
    """The probes' report interval, as their records say (probes.jsonl rows carry only a start)."""
    return next((r.get("span_s", PROBE_SPAN_S) for r in records if r["kind"] == "probe"), PROBE_SPAN_S)


def analyse(run: RunFolder) -> Report:
    """The report of the run in `run`, graded."""
    records, record = run.records, run.record
    duration = record.duration_s
    flows = [r for r in records if r["kind"] == "flow"]
    windows = [_window(t, duration) for t in run.faults]
    free = _engine_free(run.faults)
    faults = [_fault_window(t, records, flows, duration, free.get(t.id)) for t in run.faults]
    settled = [recovered_by(end, fault) for (_start, end), fault in zip(windows, faults)]
    recovering = workloads.healthy_after(windows, settled)
    baseline = [r for r in flows if r["t"] >= WARMUP_S and not any(_overlaps(r, s, e) for s, e in recovering)]
    report = Report(
        scenario=record.scenario, scenario_file=record.scenario_file, lab=record.lab, seed=record.seed,
        started_utc=record.started_utc, duration_s=duration, interrupted=record.interrupted, machine=record.machine,
        baseline_flows=_flow_stats(baseline, 0, float("inf")),
        faults=faults,
        collectives=workloads.collectives(records, windows, settled),
        probes=workloads.probes(records, windows, settled),
        telemetry=next((r["stats"] for r in records if r["kind"] == "telemetry"), None),
        mitigation=workloads.mitigation(records),
        fabric=workloads.fabric(records, windows, run.fabric.pfc),
        balance=load_balance(run.path, run.fabric),
        transport_note=TRANSPORT_NOTE, fabric_note=LOSSLESS_NOTE if run.fabric.pfc else LOSSY_NOTE,
        damaged=run.damaged)
    crossing = probe_cover.crossing_paths(run.path, windows, [run.targets.get(t.id, []) for t in run.faults],
                                          _probe_span_s(records))
    for fault, paths in zip(report.faults, crossing or []):
        fault.probed_paths = paths
    report.detectors = detectors(records, report.faults, run.targets, duration)
    expectations = [Expectation.model_validate(e) for e in record.expect]
    report.expectations = [Graded(**g) for g in grade(expectations, report, records)]
    report.passed = all(e.passed for e in report.expectations) and all(f.on_schedule for f in report.faults)
    return report
