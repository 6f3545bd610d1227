"""The session engine: one lifecycle for every run on a lab, whether `twin run` (run/runner.py)
or a training session's trainer (train/loop.py).

    observers on -> workloads start -> ready -> the clock restarts (t = 0) -> detectors
    -> faults applied and cleared on the timeline -> (until the end, or until interrupted)
    -> detectors, workloads, telemetry stop -> faults still active are cleared -> observers off

Every fault event has one schema: `fault` op=applied (id, fault_kind, scheduled_s, actual_s,
took_s, targets, error, wall) and op=cleared (id, fault_kind, scheduled_s, actual_s, took_s,
report). A second Ctrl-C does not cut the clean-up short.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from twin.detect.runner import Detectors
from twin.detect.specs import DetectorSpec
from twin.errors import TwinError
from twin.events import EventLog
from twin.faults import engine as faults
from twin.faults.base import FaultContext
from twin.lab.handle import Lab
from twin.mitigate.drain import Isolator
from twin.procs import ahead_of_the_load
from twin.progress import NullProgress, Progress
from twin.results.record import FaultTiming
from twin.run.plan import PlannedWorkload, ScheduledFault
from twin.signals import deferred_interrupts
from twin.telemetry.fabric import FabricWatch
from twin.telemetry.routes import RoutingMonitor
from twin.telemetry.sampler import Sampler
from twin.workloads.base import WorkloadContext
from twin.workloads.registry import WORKLOADS

READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Observers:
    """What watches the fabric besides the workloads (a run has them; a training session need not)."""
    routes: bool = False  # BGP, BFD and kernel route changes as events (telemetry/routes.py)
    fabric: bool = False  # queue drops and PFC pauses as events (telemetry/fabric.py)
    telemetry_ms: int = 0  # counter samples every telemetry_ms into metrics_path; 0 = none
    metrics_path: Path | None = None


class Session:
    def __init__(self, lab: Lab, events: EventLog, workloads: list[PlannedWorkload], detectors: list[DetectorSpec],
                 faults: list[ScheduledFault], seed: int, run_id: str, name: str,
                 observers: Observers = Observers(), progress: Progress | None = None):
        self.lab, self.events, self.plan_faults = lab, events, faults
        self.planned_workloads, self.detector_specs, self.name = workloads, detectors, name
        self.observers, self.progress = observers, progress or NullProgress()
        self.faults_ctx = FaultContext(lab, seed=seed)
        self.workload_ctx = WorkloadContext(lab, events, seed, run_id=run_id)
        self.timings: list[FaultTiming] = []
        self.interrupted = False
        self._running: list = []
        self._detectors: Detectors | None = None
        self._isolator: Isolator | None = None
        self._monitor = self._sampler = self._watch = None

    def run(self, duration_s: float | None, on_ready: Callable[[], None] | None = None,
            on_applied: Callable[[FaultTiming], None] | None = None) -> list[FaultTiming]:
        """duration_s None: until interrupted (KeyboardInterrupt, which SIGTERM becomes)."""
        try:
            self._start()
            if on_ready:
                on_ready()
            self._timeline(math.inf if duration_s is None else duration_s, on_applied)
        except KeyboardInterrupt:
            self.interrupted = True
            self.events.emit("scenario", op="interrupted")
            raise
        finally:
            with deferred_interrupts():
                self._stop()
        return self.timings

    # --- start and stop ---------------------------------------------------------------------
    def _start(self) -> None:
        if self.observers.routes:
            self._monitor = RoutingMonitor(self.lab, self.events)
            self._monitor.start()
        for planned in self.planned_workloads:
            kind = WORKLOADS.get(planned.kind)
            self._running.append(kind.factory(self.workload_ctx, planned.params, planned.name))
        for workload in self._running:
            workload.start()
        self._wait_ready()
        isolating = {d.label(n) for n, d in enumerate(self.detector_specs) if d.isolate}
        if isolating:
            self._isolator = Isolator(self.lab, self.events, isolating)
        if self.observers.fabric:
            self._watch = FabricWatch(self.lab, self.events)
            self._watch.start()
        # The clock starts once everything watches: the fabric watch's first count took a minute
        # at pod128, and faults due meanwhile were applied late, all at once.
        self.events.restart_clock()
        if self.observers.telemetry_ms:  # its samples are timed by the clock
            self._sampler = Sampler(self.lab, self.observers.telemetry_ms, self.observers.metrics_path)
            self._sampler.start()
        self._detectors = Detectors(self.detector_specs, self._running, self.lab, self.events)
        self._detectors.start(time.time())
        self.events.emit("scenario", op="start", name=self.name, lab=self.lab.name)

    def _wait_ready(self) -> None:
        """Until every workload is running (ranks connected, probe paths known): the clock starts
        after that, so `at_s` counts from a fabric already carrying its traffic."""
        pending = [w for w in self._running if hasattr(w, "ready")]
        if not pending:
            return
        self.progress.phase("starting workloads", len(pending))
        deadline = time.monotonic() + READY_TIMEOUT_S
        for workload in pending:
            workload.ready(max(1.0, deadline - time.monotonic()))
            self.progress.advance()

    def _stop(self) -> None:
        if self._detectors:
            self._detectors.stop()
        for workload in self._running:
            workload.stop()
        if self._sampler:
            self.events.emit("telemetry", stats=self._sampler.stop())
        self._clear_remaining()
        if self._watch:
            self._watch.stop()
        if self._isolator:
            try:
                self._isolator.restore()
            except TwinError as exc:  # the lab may be going down anyway: never block that
                self.progress.note(f"could not undrain: {exc.message}")
        if self._monitor:
            self._monitor.stop()
        self.events.emit("scenario", op="end")

    # --- the timeline ------------------------------------------------------------------------
    def _timeline(self, duration_s: float, on_applied) -> None:
        steps = []
        for fault in self.plan_faults:
            timing = FaultTiming(id=fault.timing.id, kind=fault.timing.kind, scheduled_s=fault.timing.at_s,
                                 scheduled_clear_s=fault.timing.at_s + fault.timing.duration_s
                                 if fault.timing.duration_s else None)
            self.timings.append(timing)
            steps.append((fault.timing.at_s, 0, "apply", fault, timing))
            if timing.scheduled_clear_s is not None:
                steps.append((timing.scheduled_clear_s, 1, "clear", fault, timing))
        steps.sort(key=lambda s: (s[0], -s[1]))  # at equal times, clear before apply
        self.progress.phase(f"scenario {self.name}", None if math.isinf(duration_s) else int(duration_s))
        with ahead_of_the_load():
            self._run_steps(steps, duration_s, on_applied)

    def _run_steps(self, steps: list, duration_s: float, on_applied) -> None:
        shown = 0
        for at_s, _order, op, fault, timing in steps:
            shown = self._sleep_until(at_s, shown)
            if op == "apply":
                self._apply(fault, timing, at_s)
                if on_applied:
                    on_applied(timing)
            elif timing.error is None:
                self._clear(timing, at_s)
                if self._isolator:  # the repaired link goes back into service, as an operator would do
                    self._isolator.restore(fault.targets)
        self._sleep_until(duration_s, shown)

    def _apply(self, fault: ScheduledFault, timing: FaultTiming, at_s: float) -> None:
        timing.applied_s = self.events.now()
        wall = time.time()
        try:
            faults.inject(self.faults_ctx, fault.timing, fault.params)
        except Exception as exc:  # recorded and reported; the run goes on
            timing.error = str(getattr(exc, "message", exc))
            self.progress.note(f"fault {timing.id} failed to apply: {timing.error}")
        timing.apply_took_s = round(self.events.now() - timing.applied_s, 4)
        self.events.emit("fault", op="applied", id=timing.id, fault_kind=timing.kind, scheduled_s=at_s,
                         actual_s=timing.applied_s, took_s=timing.apply_took_s, targets=fault.targets,
                         error=timing.error, wall=round(wall, 3))
        if self._watch:
            self._watch.mark()

    def _clear(self, timing: FaultTiming, scheduled_s: float | None) -> None:
        timing.cleared_s = self.events.now()
        entry = faults.clear(self.faults_ctx, timing.id)
        timing.report = entry["record"].get("report", {})
        self.events.emit("fault", op="cleared", id=timing.id, fault_kind=timing.kind, scheduled_s=scheduled_s,
                         actual_s=timing.cleared_s, took_s=round(self.events.now() - timing.cleared_s, 4),
                         report=timing.report)
        if self._watch:
            self._watch.mark()

    def _clear_remaining(self) -> None:
        """Every fault still active on the lab, this run's or not (one injected by hand before a
        `--keep` run): the lab is left as the run found it, less its faults."""
        for fault in list(reversed(self.lab.state.faults)):
            timing = next((t for t in self.timings if t.id == fault["id"]), None)
            if timing is None:
                timing = FaultTiming(id=fault["id"], kind=fault["kind"], scheduled_s=0.0)
                self.timings.append(timing)
            self._clear(timing, None)

    def _sleep_until(self, at_s: float, shown: int) -> int:
        while True:
            left = at_s - self.events.now()
            now = int(self.events.now())
            if now > shown:
                self.progress.advance(now - shown)
                shown = now
            if left <= 0:
                return shown
            time.sleep(min(left, 0.5) if left > 0.02 else left)
