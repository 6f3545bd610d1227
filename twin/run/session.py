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

from twin.detect.live import Detectors
from twin.detect.specs import DetectorSpec
from twin.errors import TwinError
from twin.events import EventLog
from twin.faults.applier import FaultApplier
from twin.lab.handle import Lab
from twin.mitigate.drain import Isolator
from twin.procs import ahead_of_the_load, alive
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


@dataclass(frozen=True)
class Step:
    """One step of the fault timeline."""
    at_s: float
    op: str  # apply | clear
    fault: ScheduledFault
    timing: FaultTiming

    def request(self) -> dict:
        if self.op == "apply":
            return {"at_s": self.at_s, "op": "apply", "timing": self.fault.timing.model_dump(),
                    "params": self.fault.params.model_dump()}
        return {"at_s": self.at_s, "op": "clear", "id": self.timing.id}


class Session:
    def __init__(self, lab: Lab, events: EventLog, workloads: list[PlannedWorkload], detectors: list[DetectorSpec],
                 faults: list[ScheduledFault], seed: int, run_id: str, name: str,
                 observers: Observers = Observers(), progress: Progress | None = None):
        self.lab, self.events, self.plan_faults = lab, events, faults
        self.planned_workloads, self.detector_specs, self.name = workloads, detectors, name
        self.observers, self.progress = observers, progress or NullProgress()
        self.seed = seed
        self.workload_ctx = WorkloadContext(lab, events, seed, run_id=run_id)
        self.timings: list[FaultTiming] = []
        self.interrupted = False
        self._running: list = []
        self._detectors: Detectors | None = None
        self._isolator: Isolator | None = None
        self._applier: FaultApplier | None = None
        self._steps: list[Step] = []
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
        if self.plan_faults:  # started first: its interpreter loads while the workloads start
            self._fault_applier()
        if self.observers.routes:
            self._monitor = RoutingMonitor(self.lab, self.events)
            self._monitor.start()
        for planned in self.planned_workloads:
            kind = WORKLOADS.get(planned.kind)
            self._running.append(kind.factory(self.workload_ctx, planned.params, planned.name))
        for workload in self._running:
            workload.start()
        self._detectors = Detectors(self.detector_specs, self._running, self.lab, self.events)
        self._detectors.start_watchers()  # collectors that need time to watch start with the workloads
        self._wait_ready()
        if self._detectors.watchers:
            self.progress.phase("waiting for detectors to watch", len(self._detectors.watchers))
            self._detectors.wait_watchers(self.progress.advance)
        isolating = {d.label(n) for n, d in enumerate(self.detector_specs) if d.isolate}
        if isolating:
            self._isolator = Isolator(self.lab, self.events, isolating)
        if self.observers.fabric:
            self._watch = FabricWatch(self.lab, self.events)
            self._watch.start()
        # The clock starts once everything watches: the fabric watch's first count took a minute
        # at pod128, and faults due meanwhile were applied late, all at once. The same for the
        # process that keeps the timeline: under CI's load it took more than 3 s to start, and the
        # smoke drill's fault at 3 s was applied 0.62 s late.
        if self._applier:
            self._applier.ready()
        self.events.restart_clock()
        if self.observers.telemetry_ms:  # its samples are timed by the clock
            self._sampler = Sampler(self.lab, self.observers.telemetry_ms, self.observers.metrics_path)
            self._sampler.start()
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
        if self._applier:
            self._applier.close()
        if self._monitor:
            self._monitor.stop()
        self.events.emit("scenario", op="end")

    # --- the timeline ------------------------------------------------------------------------
    def _timeline(self, duration_s: float, on_applied) -> None:
        """The fault applier keeps the timeline (twin/faults/applier.py: this process's threads
        would delay it); this thread records each step as its report comes."""
        steps = []
        for fault in self.plan_faults:
            timing = FaultTiming(id=fault.timing.id, kind=fault.timing.kind, scheduled_s=fault.timing.at_s,
                                 scheduled_clear_s=fault.timing.at_s + fault.timing.duration_s
                                 if fault.timing.duration_s else None)
            self.timings.append(timing)
            steps.append(Step(fault.timing.at_s, "apply", fault, timing))
            if timing.scheduled_clear_s is not None:
                steps.append(Step(timing.scheduled_clear_s, "clear", fault, timing))
        steps.sort(key=lambda s: (s.at_s, s.op == "apply"))  # at equal times, clear before apply
        self.progress.phase(f"scenario {self.name}", None if math.isinf(duration_s) else int(duration_s))
        with ahead_of_the_load():
            shown = 0
            if steps:
                self._steps = steps
                self._fault_applier().schedule(self.events.t0, [s.request() for s in steps])
                for _ in steps:
                    report = None
                    while report is None:
                        report = self._applier.done(0.5)
                        shown = self._tick(shown)
                    self._record(report, on_applied)
            while (left := duration_s - self.events.now()) > 0:
                shown = self._tick(shown)
                time.sleep(min(0.5, left))
            self._tick(shown)

    def _record(self, report: dict, on_applied=None) -> None:
        step = self._steps[report["step"]]
        fault, timing = step.fault, step.timing
        if report.get("skipped"):  # the clear of a fault that failed to apply
            return
        if step.op == "apply":
            timing.applied_s, timing.apply_took_s = report["actual_s"], report["took_s"]
            timing.error = report.get("error")
            if timing.error:
                self.progress.note(f"fault {timing.id} failed to apply: {timing.error}")
            self.events.emit("fault", op="applied", id=timing.id, fault_kind=timing.kind, scheduled_s=step.at_s,
                             actual_s=timing.applied_s, took_s=timing.apply_took_s, targets=fault.targets,
                             error=timing.error, wall=report["wall"])
        else:
            if report.get("error"):  # the fault is still on the lab: the run ends, and its clean-up tries again
                raise TwinError(f"fault {timing.id} could not be cleared: {report['error']}", hint=report.get("hint"))
            self._cleared(timing, step.at_s, report["entry"], report["actual_s"], report["took_s"])
        if self._watch:
            self._watch.mark()
        if step.op == "apply" and on_applied:
            on_applied(timing)
        elif step.op == "clear" and self._isolator:  # the repaired link goes back into service, as an operator would
            self._isolator.restore(fault.targets)

    def _cleared(self, timing: FaultTiming, scheduled_s: float | None, entry: dict, at_s: float, took_s: float) -> None:
        timing.cleared_s = at_s
        timing.report = entry["record"].get("report", {})
        self.events.emit("fault", op="cleared", id=timing.id, fault_kind=timing.kind, scheduled_s=scheduled_s,
                         actual_s=at_s, took_s=took_s, report=timing.report)

    def _clear_remaining(self) -> None:
        """Every fault still active on the lab, this run's or not (one injected by hand before a
        `--keep` run): the lab is left as the run found it, less its faults."""
        if self._applier:  # steps it took but this process did not record yet (interrupted)
            for report in self._applier.stop():
                try:
                    if "step" in report:
                        self._record(report)
                except TwinError as exc:  # a clear that failed: tried again below
                    self.progress.note(exc.message)
        self.lab.state.refresh()
        for fault in list(reversed(self.lab.state.faults)):
            timing = next((t for t in self.timings if t.id == fault["id"]), None)
            if timing is None:
                timing = FaultTiming(id=fault["id"], kind=fault["kind"], scheduled_s=0.0)
                self.timings.append(timing)
            started = self.events.now()
            entry = self._fault_applier().clear(timing.id)
            self._cleared(timing, None, entry, started, round(self.events.now() - started, 4))
            if self._watch:
                self._watch.mark()

    def _fault_applier(self) -> FaultApplier:
        if self._applier is not None and not alive(self._applier.pid):  # it failed: the log says why
            self.progress.note(f"the fault applier ended unexpectedly (see {self._applier.log}); starting another")
            self._applier.close()
            self._applier = None
        if self._applier is None:
            self._applier = FaultApplier(self.lab, self.seed)
        return self._applier

    def _tick(self, shown: int) -> int:
        """Advance the progress bar to the clock's whole seconds; returns them."""
        now = int(self.events.now())
        if now > shown:
            self.progress.advance(now - shown)
        return max(now, shown)
