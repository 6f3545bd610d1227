"""`twin run SCENARIO`: lab up, the plan's session on it (run/session.py), results folder written,
lab torn down. Ctrl-C, SIGTERM or a crash clear the faults and tear down.

The results folder gets run.json and model.json before anything runs (results/record.py), so
even a run that dies leaves a folder its report can be built from.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from twin.errors import LabStateError
from twin.events import EventLog
from twin.lab import deploy, runtime
from twin.lab.handle import Lab
from twin.lab.state import load_state
from twin.progress import NullProgress, Progress
from twin.results import record
from twin.run.plan import Plan
from twin.run.session import Observers, Session
from twin.signals import sigterm_as_interrupt
from twin.spec.labfile import load_lab


def results_dir(root: Path, name: str) -> Path:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = root / f"{name}-{stamp}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def run(plan: Plan, results_root: Path, keep: bool = False, progress: Progress | None = None,
        timeout_s: float = 90) -> Path:
    """Run the plan; returns its results folder (the report is written by results/publish.py)."""
    progress = progress or NullProgress()
    fabric = plan.fabric
    up = load_state(fabric.name) is not None
    if up:
        Lab.open(fabric.name, refuse_in_training="running a scenario on it")
        if not keep:
            raise LabStateError(f"lab '{fabric.name}' is already up",
                                hint=f"use --keep to run on it, or `twin lab down {fabric.name}`")
    directory = results_dir(results_root, plan.name)
    started_utc = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    run_record = plan.record(started_utc)
    record.write(directory, run_record, fabric)
    with sigterm_as_interrupt():
        lab = Lab.open(fabric.name) if up else \
            deploy.up(load_lab(plan.lab_path, runtime.names()), fabric, progress, timeout_s=timeout_s)
        events = EventLog(directory / record.EVENTS_FILE)
        session = Session(lab, events, plan.workloads, plan.detectors, plan.faults, seed=plan.spec.seed,
                          run_id=directory.name, name=plan.name, progress=progress,
                          observers=Observers(routes=True, fabric=True, telemetry_ms=plan.spec.telemetry_ms,
                                              metrics_path=directory / "metrics.jsonl"))
        try:
            session.run(plan.spec.duration_s)
        finally:
            events.close()
            record.write(directory, run_record.model_copy(update={"interrupted": session.interrupted}))
            if not up and not keep:
                progress.phase("tearing down", None)
                deploy.down(fabric.name, progress)
    return directory
