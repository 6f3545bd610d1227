"""The results folder of a run, as data: what the run writes so that every figure of the report
can be computed again from the folder alone (`twin report DIR`).

    run.json      what was planned: scenario, lab, seed, faults (with their targets), detectors,
                  expectations, workloads; when it started, whether it was interrupted, where
    model.json    the fabric as built (model/serialize.py)
    events.jsonl  everything that happened, `t` in seconds since the scenario started
    metrics.jsonl, probes.jsonl   counter samples and probe rows, when the run had them
    transport.jsonl               the QP states transport-state read, when it ran

A folder written by an earlier version has no run.json: its report.json (the plan's fault
timings, the expectations it graded) and the lab it names stand in for it.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from twin.errors import TwinError
from twin.events import read_events
from twin.model import serialize
from twin.model.fabric import Fabric
from twin.text import clipped, shown

FORMAT = 1
RUN_FILE = "run.json"
MODEL_FILE = "model.json"
EVENTS_FILE = "events.jsonl"
LEGACY_REPORT = "report.json"


class PlannedFault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    kind: str
    at_s: float
    duration_s: float | None = None
    targets: list[str]
    params: dict[str, Any] = {}


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: int = FORMAT
    scenario: str
    scenario_file: str
    lab: str
    seed: int
    started_utc: str
    duration_s: float
    machine: str = ""
    interrupted: bool | None = None  # None while the run is going (or if it died without a word)
    faults: list[PlannedFault] = []
    workloads: list[dict[str, Any]] = []
    detectors: list[dict[str, Any]] = []
    expect: list[dict[str, Any]] = []


def this_machine() -> str:
    return f"{platform.node()} {platform.release()}"


def write(directory: Path, record: RunRecord, fabric: Fabric | None = None) -> None:
    """run.json (rewritten atomically as the run goes: started, then finished), and model.json once."""
    tmp = directory / (RUN_FILE + ".tmp")
    tmp.write_text(record.model_dump_json(indent=1))
    tmp.replace(directory / RUN_FILE)
    if fabric is not None:
        serialize.save(fabric, directory / MODEL_FILE)


class FaultTiming(BaseModel):
    """One fault as it happened: planned times and the measured ones, from the fault events
    (the engine fills them in as the run goes; the report's fault windows extend them)."""
    id: str
    kind: str
    scheduled_s: float
    applied_s: float | None = None
    apply_took_s: float | None = None
    scheduled_clear_s: float | None = None
    cleared_s: float | None = None
    error: str | None = None
    report: dict[str, Any] = {}


@dataclass
class RunFolder:
    """A results folder read back: the plan, the model, every event, and the faults as they ran."""
    path: Path
    record: RunRecord
    fabric: Fabric
    records: list[dict]
    faults: list[FaultTiming]
    legacy: bool = False
    damaged: list[str] = field(default_factory=list)  # what could not be read, in words

    @property
    def targets(self) -> dict[str, list[str]]:
        return {f.id: f.targets for f in self.record.faults}


def load(path: Path) -> RunFolder:
    """The folder read back. What a crash damaged is skipped and said (`RunFolder.damaged`): a cut
    or garbage line of events.jsonl, a run.json or model.json that does not read (the report.json
    of the same run, or the lab file, stands in where it can)."""
    if not path.is_dir():
        raise TwinError(f"{shown(path)} is not a folder", hint="give a results folder, e.g. results/silent-drop-...")
    if not (path / EVENTS_FILE).is_file():
        raise TwinError(f"{shown(path)} has no {EVENTS_FILE}: not a results folder (or the run never started)",
                        hint="a run writes run.json and events.jsonl first, then the report")
    records, damage = read_events(path / EVENTS_FILE)
    damaged = [str(damage)] if damage else []
    if (path / RUN_FILE).is_file():
        try:
            record = RunRecord.model_validate_json((path / RUN_FILE).read_bytes())
        except ValueError as exc:
            if not (path / LEGACY_REPORT).is_file():
                raise TwinError(f"{shown(path / RUN_FILE)} cannot be read ({_first_line(exc)}) and there is no "
                                f"{LEGACY_REPORT} to stand in for it", hint="the folder was damaged: the events "
                                "alone do not say what was planned") from None
            damaged.append(f"{RUN_FILE} does not read ({_first_line(exc)}): the plan is taken from {LEGACY_REPORT}")
        else:
            fabric, note = _model(path, record.lab)
            return RunFolder(path, record, fabric, records, fault_timings(record, records),
                             damaged=damaged + ([note] if note else []))
    if (path / LEGACY_REPORT).is_file():
        run = _legacy(path, records)
        run.damaged = damaged + run.damaged
        return run
    raise TwinError(f"{shown(path)} has neither {RUN_FILE} nor {LEGACY_REPORT}",
                    hint="the run was interrupted before it wrote either: only its events are left")


def _first_line(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"it has no '{exc.args[0]}'"
    return clipped(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 160)


def _model(path: Path, lab: str) -> tuple[Fabric, str | None]:
    """model.json, or the lab rebuilt from its file when model.json is gone or damaged."""
    try:
        return serialize.load(path / MODEL_FILE), None
    except (ValueError, KeyError, TypeError, OSError) as exc:
        problem = _first_line(exc)
    from twin.lab.files import open_lab
    try:
        fabric = open_lab(lab)[1]
    except TwinError as exc:
        raise TwinError(f"{shown(path / MODEL_FILE)} cannot be read ({problem}) and lab '{shown(lab)}' cannot be "
                        f"rebuilt ({exc.message})", hint=f"run `twin report` where labs/{lab}.yaml is") from None
    return fabric, f"{MODEL_FILE} does not read ({problem}): the lab was rebuilt from its file '{lab}'"


def fault_timings(record: RunRecord, records: list[dict]) -> list[FaultTiming]:
    """The planned faults in plan order, then any other fault the run cleared (one injected by
    hand before a `--keep` run), each with what its `fault` events say happened."""
    timings = {f.id: FaultTiming(id=f.id, kind=f.kind, scheduled_s=f.at_s,
                                 scheduled_clear_s=f.at_s + f.duration_s if f.duration_s else None)
               for f in record.faults}
    for r in records:
        if r["kind"] != "fault" or not isinstance(r.get("id"), str) or "op" not in r:
            continue
        timing = timings.setdefault(r["id"], FaultTiming(id=r["id"], kind=r.get("fault_kind", ""), scheduled_s=0.0))
        if r["op"] == "applied":
            timing.applied_s, timing.apply_took_s, timing.error = r["actual_s"], r.get("took_s"), r.get("error")
        elif r["op"] == "cleared":
            timing.cleared_s, timing.report = r["actual_s"], r.get("report") or {}
    return list(timings.values())


def _legacy(path: Path, records: list[dict]) -> RunFolder:
    """A folder of an earlier version: its report.json has the fault timings and the graded
    expectations; the fault events the targets; the lab is rebuilt from its file."""
    try:
        old = json.loads((path / LEGACY_REPORT).read_bytes())
        if not isinstance(old, dict):
            raise ValueError("not a JSON object")
        return _from_report(path, records, old)
    except (ValueError, KeyError, TypeError) as exc:
        raise TwinError(f"{shown(path / LEGACY_REPORT)} cannot be read ({_first_line(exc)}), and nothing else in "
                        "the folder says what the run planned", hint="the folder was damaged or cut short") from None


def _from_report(path: Path, records: list[dict], old: dict) -> RunFolder:
    from twin.lab.files import open_lab

    applied = {r["id"]: r for r in records if r["kind"] == "fault" and r.get("op") == "applied"}
    timings = [FaultTiming(**{k: f[k] for k in FaultTiming.model_fields if f.get(k) is not None})
               for f in old["faults"]]
    planned = [PlannedFault(id=t.id, kind=t.kind, at_s=t.scheduled_s,
                            duration_s=(t.scheduled_clear_s - t.scheduled_s) if t.scheduled_clear_s else None,
                            targets=applied.get(t.id, {}).get("targets") or []) for t in timings]
    detectors = [{"name": r["detector"]} for r in records if r["kind"] == "detector" and r.get("op") == "start"]
    record = RunRecord(scenario=old["scenario"], scenario_file=old["scenario_file"], lab=old["lab"], seed=old["seed"],
                       started_utc=old["started_utc"], duration_s=old["duration_s"], machine=old.get("machine", ""),
                       interrupted=old.get("interrupted"), faults=planned, detectors=detectors,
                       expect=[e["expect"] for e in old.get("expectations", [])])
    scenario_dir = Path(old["scenario_file"]).parent
    lab_ref = old["lab"]
    try:
        fabric = open_lab(lab_ref)[1]
    except TwinError as exc:
        raise TwinError(f"{path} was written by an earlier version and its lab '{lab_ref}' cannot be found "
                        f"({exc.message})", hint=f"run `twin report` where labs/{lab_ref}.yaml is (e.g. "
                        f"the folder {scenario_dir.parent or '.'} the run was started in)") from None
    return RunFolder(path, record, fabric, records, timings, legacy=True)
