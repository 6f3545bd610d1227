"""The trainer: a background process per session (`python -m twin.train.loop LAB_DIR`).

Runs a training job (gloo allreduce steps) and the probe mesh with the built-in localizer,
injects the session's hidden faults after a seeded random delay, and keeps everything running
until SIGTERM; then stops the workloads and clears the faults. Its event log is sealed (it
holds the ground truth and the detector's verdicts, shown by `twin train reveal`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from twin.detect.runner import Detectors
from twin.events import EventLog
from twin.faults import engine
from twin.faults.base import FaultContext
from twin.lab.handle import running_lab
from twin.lab.runtime import get_runtime
from twin.seal import key_of, seal
from twin.signals import deferred_interrupts, sigterm_as_interrupt
from twin.workloads import WORKLOAD_KINDS, WorkloadContext
from twin.train.pools import onset_delay_s
from twin.train.session import hidden_faults, training_dir

JOB = {"kind": "train", "size": "1MiB", "compute_ms": 150, "timeout_s": 4}
PROBES = {"kind": "probes", "interval_ms": 100}


def progress(lab: str, phase: str, **extra) -> None:
    path = training_dir(lab) / "progress.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"phase": phase, "wall": time.time(), **extra}))
    os.replace(tmp, path)


def run(lab: str) -> None:
    sealed = hidden_faults(lab)
    seed = sealed["seed"]
    state, fabric = running_lab(lab)
    runtime = get_runtime(state.runtime, lab)
    key = key_of(state.directory)
    events = EventLog(training_dir(lab) / "events.sealed", encode=lambda line: seal(key, line))
    ctx = FaultContext(runtime, state, fabric, seed=seed)
    wctx = WorkloadContext(runtime, state, fabric, events, seed, run_id="training")
    workloads, detectors = [], None
    with sigterm_as_interrupt():
        try:
            for spec in (JOB, PROBES):
                kind = WORKLOAD_KINDS[spec["kind"]]
                params = kind.params.model_validate({k: v for k, v in spec.items() if k != "kind"})
                workloads.append(kind.factory(wctx, params, spec["kind"]))
            for workload in workloads:
                workload.start()
            for workload in workloads:
                if hasattr(workload, "ready"):
                    workload.ready(120)
            events.restart_clock()
            detectors = Detectors([{"builtin": "probe-localizer"}], workloads, wctx)
            detectors.start(time.time())
            progress(lab, "ready")
            time.sleep(onset_delay_s(seed))
            for entry in sealed["faults"]:
                timing, params = engine.parse(entry)
                onset = events.now()
                engine.inject(ctx, timing, params)
                events.emit("fault", op="applied", id=timing.id, fault_kind=timing.kind, actual_s=onset,
                            took_s=round(events.now() - onset, 3), targets=engine.targets(timing, params, fabric),
                            wall=time.time() - (events.now() - onset))
            progress(lab, "injected")
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        except Exception as exc:  # the session goes on without a trainer; `start` reports it
            progress(lab, "failed", error=str(getattr(exc, "message", exc)))
            raise
        finally:
            with deferred_interrupts():
                if detectors:
                    detectors.stop()
                for workload in workloads:
                    workload.stop()
                for fault in list(reversed(ctx.state.faults)):
                    engine.clear(ctx, fault["id"])
                    events.emit("fault", op="cleared", id=fault["id"], actual_s=events.now())
                events.close()
                progress(lab, "stopped")


if __name__ == "__main__":
    run(Path(sys.argv[1]).name)
