"""`twin run SCENARIO`: lab up, workloads and monitors on, faults on schedule, then clear,
tear down and write the results folder. Ctrl-C, SIGTERM or a crash clear faults and tear down."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from pathlib import Path

from twin.lab import deploy
from twin.errors import LabStateError, TwinError
from twin.detect.runner import Detectors, detector_name
from twin.events import EventLog
from twin.faults import engine
from twin.faults.base import FaultContext
from twin.spec.labfile import load_lab
from twin.mitigate.drain import Isolator
from twin.telemetry.routes import RoutingMonitor
from twin.progress import NullProgress, Progress
from twin.lab.runtime import get_runtime, names
from twin.run.plan import Scenario
from twin.signals import deferred_interrupts, sigterm_as_interrupt
from twin.lab.state import load_state
from twin.telemetry.fabric import FabricWatch
from twin.telemetry.sampler import Sampler
from twin.train.session import refuse_during_training
from twin.workloads import WORKLOAD_KINDS, WorkloadContext

SCHEDULE_TOLERANCE_S = 0.05


@dataclass
class FaultTiming:
    id: str
    kind: str
    scheduled_s: float
    applied_s: float | None = None
    apply_took_s: float | None = None
    scheduled_clear_s: float | None = None
    cleared_s: float | None = None
    error: str | None = None
    report: dict = field(default_factory=dict)


@dataclass
class RunResult:
    scenario: Scenario
    directory: Path
    events: EventLog
    faults: list[FaultTiming]
    started_utc: str
    interrupted: bool = False


def results_dir(root: Path, name: str) -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = root / f"{name}-{stamp}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def run(scenario: Scenario, results_root: Path, keep: bool = False, progress: Progress | None = None,
        timeout_s: float = 90) -> RunResult:
    progress = progress or NullProgress()
    fabric = scenario.fabric
    lab_file = load_lab(scenario.lab_path, names())
    existing = load_state(fabric.name)
    if existing is not None:
        refuse_during_training(existing, "running a scenario on it")
    if existing is not None and not keep:
        raise LabStateError(f"lab '{fabric.name}' is already up",
                            hint=f"use --keep to run on it, or `twin lab down {fabric.name}`")
    directory = results_dir(results_root, scenario.spec.name)
    started_utc = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with sigterm_as_interrupt():
        built_here = existing is None
        state = deploy.up(lab_file, fabric, progress, timeout_s=timeout_s) if built_here else existing
        runtime = get_runtime(state.runtime, fabric.name)
        ctx = FaultContext(runtime, state, fabric, seed=scenario.spec.seed)
        events = EventLog(directory / "events.jsonl")
        result = RunResult(scenario, directory, events, [], started_utc)
        monitor = RoutingMonitor(runtime, state, fabric, events)
        sampler = Sampler(runtime, state, fabric, scenario.spec.telemetry_ms, directory / "metrics.jsonl") \
            if scenario.spec.telemetry_ms else None
        workloads, detectors, isolator, watch = [], None, None, None
        wctx = WorkloadContext(runtime, state, fabric, events, scenario.spec.seed, run_id=directory.name)
        try:
            monitor.start()
            for number, spec in enumerate(scenario.workloads):
                kind = WORKLOAD_KINDS[spec["kind"]]
                params = kind.params.model_validate({k: v for k, v in spec.items() if k != "kind"})
                workloads.append(kind.factory(wctx, params, f"{spec['kind']}-{number}"))
            for workload in workloads:
                workload.start()
            _wait_ready(workloads, progress)
            events.restart_clock()
            isolating = {detector_name(d.model_dump(), n) for n, d in enumerate(scenario.detectors) if d.isolate}
            if isolating:
                isolator = Isolator(ctx, events, isolating)
            detectors = Detectors([d.model_dump() for d in scenario.detectors], workloads, wctx)
            detectors.start(time.time())
            if sampler:
                sampler.start()
            watch = FabricWatch(runtime, state, fabric, events)
            watch.start()
            events.emit("scenario", op="start", name=scenario.spec.name, lab=fabric.name)
            _run_timeline(ctx, scenario, events, result, progress, isolator, watch)
        except KeyboardInterrupt:
            result.interrupted = True
            events.emit("scenario", op="interrupted")
            raise
        finally:
            with deferred_interrupts():  # a second Ctrl-C must not cut the clean-up short
                if detectors:
                    detectors.stop()
                for workload in workloads:
                    workload.stop()
                if sampler:
                    events.emit("telemetry", stats=sampler.stop())
                _clear_remaining(ctx, events, result)
                if watch:
                    watch.stop()
                if isolator:
                    try:
                        isolator.restore()
                    except TwinError as exc:  # the lab may be going down anyway: never block that
                        progress.note(f"could not undrain: {exc.message}")
                monitor.stop()
                events.emit("scenario", op="end")
                events.close()
                if built_here and not keep:
                    progress.phase("tearing down", None)
                    deploy.down(fabric.name, progress)
    return result


def _wait_ready(workloads: list, progress: Progress, timeout_s: float = 120.0) -> None:
    """Until every workload is running (ranks connected, probe paths known): the scenario's
    clock starts after that, so `at_s` counts from a fabric already carrying its traffic."""
    pending = [w for w in workloads if hasattr(w, "ready")]
    if not pending:
        return
    progress.phase("starting workloads", len(pending))
    deadline = time.monotonic() + timeout_s
    for workload in pending:
        workload.ready(max(1.0, deadline - time.monotonic()))
        progress.advance()


def _run_timeline(ctx: FaultContext, scenario: Scenario, events: EventLog, result: RunResult,
                  progress: Progress, isolator: Isolator | None, watch: FabricWatch) -> None:
    duration = scenario.spec.duration_s
    steps = []
    for fault in scenario.faults:
        timing = FaultTiming(fault.timing.id, fault.timing.kind, fault.timing.at_s,
                             scheduled_clear_s=fault.timing.at_s + fault.timing.duration_s
                             if fault.timing.duration_s else None)
        result.faults.append(timing)
        steps.append((fault.timing.at_s, 0, "apply", fault, timing))
        if timing.scheduled_clear_s is not None:
            steps.append((timing.scheduled_clear_s, 1, "clear", fault, timing))
    steps.sort(key=lambda s: (s[0], -s[1]))  # at equal times, clear before apply
    progress.phase(f"scenario {scenario.spec.name}", int(duration))
    shown = 0
    for at_s, _order, op, fault, timing in steps:
        shown = _sleep_until(events, at_s, progress, shown)
        if op == "apply":
            timing.applied_s = events.now()
            try:
                engine.inject(ctx, fault.timing, fault.params)
            except Exception as exc:  # recorded and reported; the run goes on
                timing.error = str(getattr(exc, "message", exc))
                progress.note(f"fault {timing.id} failed to apply: {timing.error}")
            timing.apply_took_s = round(events.now() - timing.applied_s, 4)
            events.emit("fault", op="applied", id=timing.id, fault_kind=timing.kind,
                        scheduled_s=at_s, actual_s=timing.applied_s, took_s=timing.apply_took_s,
                        targets=fault.targets, error=timing.error)
            watch.mark()
        elif timing.error is None:
            _clear(ctx, events, timing, at_s)
            watch.mark()
            if isolator:  # the repaired link goes back into service, as an operator would do
                isolator.restore(fault.targets)
    _sleep_until(events, scenario.spec.duration_s, progress, shown)


def _clear(ctx: FaultContext, events: EventLog, timing: FaultTiming, scheduled_s: float | None) -> None:
    timing.cleared_s = events.now()
    entry = engine.clear(ctx, timing.id)
    timing.report = entry["record"].get("report", {})
    events.emit("fault", op="cleared", id=timing.id, fault_kind=timing.kind, scheduled_s=scheduled_s,
                actual_s=timing.cleared_s, took_s=round(events.now() - timing.cleared_s, 4), report=timing.report)


def _clear_remaining(ctx: FaultContext, events: EventLog, result: RunResult) -> None:
    for fault in list(reversed(ctx.state.faults)):
        timing = next((t for t in result.faults if t.id == fault["id"]), None)
        if timing is None:
            timing = FaultTiming(fault["id"], fault["kind"], 0.0)
            result.faults.append(timing)
        _clear(ctx, events, timing, None)


def _sleep_until(events: EventLog, at_s: float, progress: Progress, shown: int) -> int:
    while True:
        left = at_s - events.now()
        now = int(events.now())
        if now > shown:
            progress.advance(now - shown)
            shown = now
        if left <= 0:
            return shown
        time.sleep(min(left, 0.5) if left > 0.02 else left)
