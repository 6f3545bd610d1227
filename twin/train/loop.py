"""The trainer: a background process per session (`python -m twin.train.loop LAB_DIR`).

A session of the run engine (run/session.py) on the session's lab: a training job (gloo allreduce
steps) and the probe mesh with the built-in likelihood detector, the session's hidden faults applied after
a seeded random delay, everything kept running until SIGTERM; then the engine stops the
workloads and clears the faults. Its event log is sealed (it holds the ground truth and the
detector's verdicts, shown by `twin train reveal`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from twin.detect.specs import DetectorSpec
from twin.events import EventLog
from twin.faults import engine
from twin.lab.handle import Lab
from twin.run.plan import PlannedWorkload, ScheduledFault
from twin.run.session import Session
from twin.seal import key_of, seal
from twin.signals import sigterm_as_interrupt
from twin.train.pools import onset_delay_s
from twin.train.trainee import hidden_faults, training_dir
from twin.workloads.registry import WORKLOADS

JOB = {"kind": "train", "size": "1MiB", "compute_ms": 150, "timeout_s": 4}
PROBES = {"kind": "probes", "interval_ms": 100}
DETECTORS = [DetectorSpec(builtin="probe-likelihood")]


def progress(lab: str, phase: str, **extra) -> None:
    path = training_dir(lab) / "progress.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"phase": phase, "wall": time.time(), **extra}))
    os.replace(tmp, path)


def planned(entries: list[dict], lab: Lab, onset_s: float) -> list[ScheduledFault]:
    """The hidden fault entries on the session's timeline: all at onset, until the session ends."""
    faults = []
    for entry in entries:
        timing, params = engine.parse({**entry, "at_s": onset_s})
        faults.append(ScheduledFault(timing, params, engine.targets(timing, params, lab.fabric)))
    return faults


def run(name: str) -> None:
    sealed = hidden_faults(name)
    seed = sealed["seed"]
    lab = Lab.open(name)
    key = key_of(lab.paths.root)
    events = EventLog(training_dir(name) / "events.sealed", encode=lambda line: seal(key, line))
    workloads = [PlannedWorkload(spec["kind"], spec["kind"], WORKLOADS.get(spec["kind"]).params.model_validate(
        {k: v for k, v in spec.items() if k != "kind"})) for spec in (JOB, PROBES)]
    faults = planned(sealed["faults"], lab, onset_delay_s(seed))
    applied: list = []

    def on_applied(timing) -> None:
        if timing.error:
            raise RuntimeError(f"hidden fault {timing.id} failed to apply: {timing.error}")
        applied.append(timing)
        if len(applied) == len(faults):
            progress(name, "injected")

    session = Session(lab, events, workloads, DETECTORS, faults, seed=seed, run_id="training", name="training")
    with sigterm_as_interrupt():
        try:
            session.run(None, on_ready=lambda: progress(name, "ready"), on_applied=on_applied)
        except KeyboardInterrupt:
            pass
        except Exception as exc:  # the session goes on without a trainer; `start` reports it
            progress(name, "failed", error=str(getattr(exc, "message", exc)))
            raise
        finally:
            events.close()
            progress(name, "stopped")


if __name__ == "__main__":
    run(Path(sys.argv[1]).name)
