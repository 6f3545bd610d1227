"""The scenario file contract (../shared/formats.md): schema, loading, checks against the lab.

Loading touches nothing on the machine. Every problem is collected with file, line and hint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from twin.lab import runtime
from twin.model.build import build_fabric
from twin.run.drill import shorten
from twin.errors import LabFileError, Problem, TwinError
from twin.results.expectations import check as expectations_check
from twin.faults import engine
from twin.faults.base import TargetError, Timing
from twin.spec.labfile import LAB_NAME_PATTERN, load_lab, resolve_lab_path
from twin.lab.handle import search_dirs
from twin.model.fabric import Fabric
from twin.workloads import WORKLOAD_KINDS
from twin.spec.yamlsrc import closest, dotted, read_yaml, validate


class ScenarioSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    name: str = Field(pattern=LAB_NAME_PATTERN.replace("{0,11}", "{0,39}"),
                      description="lowercase letters, digits and -, e.g. silent-drop")
    lab: str = Field(description="a lab name from labs/, or a path to a lab file")
    duration_s: float = Field(gt=0, le=3600, description="seconds the scenario runs")
    seed: int = Field(1, ge=0, description="every random choice derives from it")
    workloads: list[dict[str, Any]] = Field(default_factory=list, description="traffic to run, e.g. kind: flows")
    faults: list[dict[str, Any]] = Field(default_factory=list, description="faults on the timeline")
    detectors: list[dict[str, Any]] = Field(default_factory=list, description="detection tools to grade")
    expect: list[dict[str, Any]] = Field(default_factory=list, description="expectations to grade")
    telemetry_ms: int = Field(100, ge=0, le=60000,
                              description="counter sampling period into metrics.jsonl; 0 = off")


@dataclass(frozen=True)
class ScheduledFault:
    timing: Timing
    params: Any
    targets: list[str]

    def end_s(self, duration_s: float) -> float:
        return self.timing.at_s + self.timing.duration_s if self.timing.duration_s else duration_s


@dataclass(frozen=True)
class Scenario:
    path: Path
    spec: ScenarioSpec
    lab_path: Path
    fabric: Fabric
    faults: list[ScheduledFault]
    workloads: list[dict[str, Any]]
    detectors: list = field(default_factory=list)  # expectations.DetectorSpec
    expectations: list = field(default_factory=list)  # expectations.Expectation


def load_scenario(path: Path, quick: bool = False) -> Scenario:
    """quick: the shortened timeline of e2e.shorten (CI drills)."""
    data, source = read_yaml(path)
    if quick:
        shorten(data)
    spec = validate(ScenarioSpec, data, str(path), source)
    problems: list[Problem] = []

    def problem(loc: tuple, message: str, hint: str | None = None) -> None:
        problems.append(Problem(str(path), source.line(loc), dotted(loc), message, hint))

    lab_ref = spec.lab if Path(spec.lab).is_absolute() or "/" not in spec.lab else str(path.parent / spec.lab)
    try:
        lab_path = resolve_lab_path(lab_ref, search_dirs())
        fabric = build_fabric(load_lab(lab_path, runtime.names()))
    except LabFileError as exc:
        raise LabFileError([Problem(str(path), source.line(("lab",)), "lab",
                                    f"the lab file does not validate ({len(exc.problems)} problems)",
                                    "fix the lab file first")] + exc.problems) from None
    except TwinError as exc:
        raise LabFileError([Problem(str(path), source.line(("lab",)), "lab", exc.message, exc.hint)]) from None

    faults = _check_faults(spec, fabric, problem)
    for number, workload in enumerate(spec.workloads):
        kind = workload.get("kind")
        if kind not in WORKLOAD_KINDS:
            guess = closest(str(kind), sorted(WORKLOAD_KINDS))
            problem(("workloads", number, "kind"), f"unknown workload kind {kind!r}",
                    (f"did you mean {guess!r}? " if guess else "")
                    + f"valid kinds: {', '.join(sorted(WORKLOAD_KINDS))}")
        else:
            _check_workload(WORKLOAD_KINDS[kind], workload, fabric, ("workloads", number), problem)
    detectors, expectations = expectations_check(spec, {f.get("id") for f in spec.faults if isinstance(f, dict)},
                                                 problem)
    if problems:
        raise LabFileError(problems)
    return Scenario(path=path, spec=spec, lab_path=lab_path, fabric=fabric, faults=faults,
                    workloads=list(spec.workloads), detectors=detectors, expectations=expectations)


def _check_workload(kind, workload: dict, fabric: Fabric, loc: tuple, problem) -> None:
    try:
        params = kind.params.model_validate({k: v for k, v in workload.items() if k != "kind"})
    except ValidationError as exc:
        for error in exc.errors():
            key = loc + tuple(error["loc"][:1])
            hint = "see README, workloads"
            if error["type"] == "extra_forbidden":
                guess = closest(str(error["loc"][0]), sorted(kind.params.model_fields))
                hint = (f"did you mean '{guess}'? " if guess else "") + \
                    f"keys for this kind: {', '.join(sorted(kind.params.model_fields))}"
            problem(key, error["msg"].lower(), hint)
        return
    try:
        kind.check(params, fabric)
    except ValueError as exc:  # may name the parameter it is about in `key`
        key = getattr(exc, "key", None)
        problem(loc + ((key,) if key in workload else ()), str(exc), "see README, workloads")


def _check_faults(spec: ScenarioSpec, fabric: Fabric, problem) -> list[ScheduledFault]:
    faults: list[ScheduledFault] = []
    for number, entry in enumerate(spec.faults):
        loc = ("faults", number)
        try:
            timing, params = engine.parse(entry)
        except TwinError as exc:
            key = next((k for k in entry if f"'{k}'" in exc.message or f" {k}:" in exc.message), "kind")
            problem(loc + (key,), exc.message, exc.hint)
            continue
        try:
            targets = engine.targets(timing, params, fabric)
        except TargetError as exc:
            key = next((k for k in ("link", "node", "host") if k in entry and str(entry[k]) in exc.message), None)
            problem(loc + ((key,) if key else ("link" if "link" in entry else "node",)), exc.message, exc.hint)
            continue
        if timing.at_s >= spec.duration_s:
            problem(loc + ("at_s",), f"starts at {timing.at_s} s, after the scenario ends ({spec.duration_s} s)",
                    "lower at_s or raise duration_s")
            continue
        if timing.duration_s and timing.at_s + timing.duration_s > spec.duration_s:
            problem(loc + ("duration_s",), f"ends at {timing.at_s + timing.duration_s} s, after the scenario "
                    f"ends ({spec.duration_s} s)", "shorten it, or omit duration_s to last until the end")
            continue
        fault = ScheduledFault(timing, params, targets)
        for other in faults:
            if other.timing.id == timing.id:
                problem(loc + ("id",), f"fault id '{timing.id}' is used twice", "give each fault its own id")
            shared = set(other.targets) & set(targets)
            if shared and timing.at_s < other.end_s(spec.duration_s) and other.timing.at_s < fault.end_s(spec.duration_s):
                problem(loc + ("at_s",), f"overlaps fault '{other.timing.id}' on {', '.join(sorted(shared))} "
                        "while both are active", "two faults on one target cannot both apply: move one in time")
        faults.append(fault)
    return sorted(faults, key=lambda f: f.timing.at_s)
