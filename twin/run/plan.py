"""Loading a scenario file (docs/formats.md) into a plan: the document's keys (spec/scenario.py),
the lab it runs on, and every entry checked against its kind's registry and the lab: fault
params and targets, workload params, detectors, expectations and what they refer to.

The plan is typed and fully validated: the run uses it as it is, nothing is validated twice.
Loading touches nothing on the machine; every problem is collected with file, line and hint.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from twin.collectives.groups import select_nics
from twin.collectives.metrics import OPS
from twin.detect.builtins import BUILTINS
from twin.detect.specs import DetectorSpec
from twin.errors import LabFileError, Problem, TwinError, closest
from twin.faults import engine
from twin.faults.base import Timing
from twin.faults.change import Change
from twin.faults.overlap import Span, clashes
from twin.faults.ranks import OnRanks
from twin.faults.registry import get_kind
from twin.lab import runtime
from twin.lab.files import search_dirs
from twin.model.build import build_fabric
from twin.model.fabric import Fabric
from twin.model.targets import TargetError
from twin.results.expectations import EXPECTATIONS, Expectation, workload_names
from twin.results.record import PlannedFault, RunRecord, this_machine
from twin.spec.labfile import load_lab, resolve_lab_path
from twin.spec.quick import shorten
from twin.spec.scenario import ScenarioSpec
from twin.spec.yamlsrc import SourceMap, dotted, read_yaml, validate
from twin.text import key_note, shown_name
from twin.workloads.registry import WORKLOADS

COLLECTIVE_KINDS = frozenset(OPS) | {"train"}
# Expectations that grade some workloads only: naming another (or none at all) can never pass.
GRADED_KINDS = {"collective": COLLECTIVE_KINDS, "recover": COLLECTIVE_KINDS | {"flows"}, "loss": {"flows"},
                "hang": COLLECTIVE_KINDS}


@dataclass(frozen=True)
class ScheduledFault:
    timing: Timing
    params: Any  # the kind's params model
    targets: list[str]

    def end_s(self, duration_s: float) -> float:
        return self.timing.at_s + self.timing.duration_s if self.timing.duration_s else duration_s

    def planned(self) -> PlannedFault:
        return PlannedFault(id=self.timing.id, kind=self.timing.kind, at_s=self.timing.at_s,
                            duration_s=self.timing.duration_s, targets=self.targets,
                            params=self.params.model_dump(exclude_none=True))


@dataclass(frozen=True)
class PlannedWorkload:
    name: str  # "<kind>-<index in the scenario>": names its events and files
    kind: str
    params: BaseModel  # the kind's params, validated


@dataclass(frozen=True)
class Plan:
    path: Path
    spec: ScenarioSpec
    lab_path: Path
    fabric: Fabric
    faults: list[ScheduledFault]  # by start time
    workloads: list[PlannedWorkload] = field(default_factory=list)
    detectors: list[DetectorSpec] = field(default_factory=list)
    expectations: list[Expectation] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    def with_runtime(self, runtime_name: str | None) -> Plan:
        return dataclasses.replace(self, fabric=self.fabric.with_runtime(runtime_name))

    def record(self, started_utc: str) -> RunRecord:
        """run.json as the run starts (results/record.py)."""
        return RunRecord(scenario=self.spec.name, scenario_file=str(self.path), lab=self.fabric.name,
                         seed=self.spec.seed, started_utc=started_utc, duration_s=self.spec.duration_s,
                         machine=this_machine(), faults=[f.planned() for f in self.faults],
                         workloads=[{"name": w.name, "kind": w.kind, **w.params.model_dump(exclude_none=True)}
                                    for w in self.workloads],
                         detectors=[d.model_dump(exclude_none=True) for d in self.detectors],
                         expect=[e.model_dump(exclude_none=True) for e in self.expectations])


def load_scenario(path: Path, quick: bool = False, parsed: tuple[dict, SourceMap] | None = None) -> Plan:
    """quick: the shortened timeline of spec/quick.py (CI drills), which changes the document;
    parsed: read_yaml's answer for the file, where the caller has it already."""
    data, source = parsed or read_yaml(path)
    if quick:
        shorten(data)
    try:
        spec = validate(ScenarioSpec, data, str(path), source)
    except LabFileError as exc:
        raise _with_entry_problems(exc, data, path, source) from None
    problems: list[Problem] = []

    def problem(loc: tuple, message: str, hint: str | None = None) -> None:
        problems.append(Problem(str(path), source.line(loc), dotted(loc), message, hint))

    lab_path, fabric = _lab(spec, path, source)
    faults = _faults(spec, fabric, problem)
    workloads = _workloads(spec, fabric, problem)
    _rank_faults(spec, fabric, faults, workloads, problem)
    detectors = _detectors(spec, problem)
    expectations = _expectations(spec, detectors, problem)
    if problems:
        raise LabFileError(problems)
    return Plan(path=path, spec=spec, lab_path=lab_path, fabric=fabric, faults=faults, workloads=workloads,
                detectors=detectors, expectations=expectations)


CHANGE_KIND = Change.name


def _lab(spec: ScenarioSpec, path: Path, source) -> tuple[Path, Fabric]:
    """A name from the lab folders, or a path (anything with a / or a .yaml suffix) relative to the
    scenario's folder."""
    is_path = "/" in spec.lab or spec.lab.endswith((".yaml", ".yml"))
    ref = str(path.parent / spec.lab) if is_path and not Path(spec.lab).is_absolute() else spec.lab
    try:
        lab_path = resolve_lab_path(ref, search_dirs())
        return lab_path, build_fabric(load_lab(lab_path, runtime.names()))
    except LabFileError as exc:
        raise LabFileError([Problem(str(path), source.line(("lab",)), "lab",
                                    f"the lab file does not validate ({len(exc.problems)} problem"
                                    f"{'s' if len(exc.problems) > 1 else ''})",
                                    "fix the lab file first")] + exc.problems) from None
    except TwinError as exc:
        raise LabFileError([Problem(str(path), source.line(("lab",)), "lab", exc.message, exc.hint)]) from None


def _text(entry: dict, key: str) -> str | None:
    """An entry's name-like key (kind, id) if it is text: anything else is refused where the
    entry itself is validated, and must not break the cross-references before that."""
    value = entry.get(key)
    return value if isinstance(value, str) else None


def _refusal(errors: list[dict]) -> str:
    """One key's validation errors as one message: a union's members each refuse the value
    ("Input should be a valid boolean", "Input should be 'rc'"), which say together what it may be."""
    messages = list(dict.fromkeys(e["msg"].removeprefix("Value error, ") for e in errors))
    if len(messages) > 1 and all(m.startswith("Input should be ") for m in messages):
        messages = ["Input should be " + " or ".join(m.removeprefix("Input should be ") for m in messages)]
    value = errors[0].get("input")
    got = f" (got {value!r})" if len(errors) > 1 and not isinstance(value, (dict, list)) else ""
    return "; ".join(messages) + got


def _workloads(spec: ScenarioSpec, fabric: Fabric, problem) -> list[PlannedWorkload]:
    planned = []
    for number, workload in enumerate(spec.workloads):
        loc, kind_name = ("workloads", number), _text(workload, "kind")
        if kind_name not in WORKLOADS:
            guess = closest(str(kind_name), WORKLOADS.names())
            problem(loc + ("kind",), f"unknown workload kind {kind_name!r}",
                    (f"did you mean {guess!r}? " if guess else "") + f"valid kinds: {', '.join(WORKLOADS.names())}")
            continue
        kind = WORKLOADS.get(kind_name)
        try:
            params = kind.params.model_validate({k: v for k, v in workload.items() if k != "kind"})
        except ValidationError as exc:
            refused: dict[tuple, list[dict]] = {}  # a key's errors: one per member of a union (bool | 'rc')
            for error in exc.errors():
                if error["type"] == "extra_forbidden":
                    guess = closest(str(error["loc"][0]), sorted(kind.params.model_fields))
                    problem(loc + tuple(error["loc"][:1]), "unknown key",
                            key_note(error["loc"][0]) + (f"did you mean '{guess}'? " if guess else "")
                            + f"keys for this kind: {', '.join(sorted(kind.params.model_fields))}")
                    continue
                refused.setdefault(tuple(error["loc"][:1]), []).append(error)
            for key, errors in refused.items():
                problem(loc + key, _refusal(errors), "see docs/formats.md, workloads")
            continue
        try:
            kind.check(params, fabric)
        except ValueError as exc:  # may name the parameter it is about in `key`
            key = getattr(exc, "key", None)
            problem(loc + ((key,) if key in workload else ()), str(exc),
                    getattr(exc, "hint", None) or "see docs/formats.md, workloads")
            continue
        planned.append(PlannedWorkload(f"{kind_name}-{number}", kind_name, params))
    return planned


def timeline_entries(spec: ScenarioSpec) -> list[tuple[tuple, dict]]:
    """(where in the file, fault entry) for every `faults:` entry and every `changes:` entry (a
    planned change is a fault entry of kind `change`: one engine applies, undoes and reports both)."""
    return _timeline(spec.faults, spec.changes)


def _timeline(faults: list, changes: list) -> list[tuple[tuple, Any]]:
    entries = [(("faults", number), entry) for number, entry in enumerate(faults)]
    for number, entry in enumerate(changes):
        entries.append((("changes", number), {"kind": CHANGE_KIND, **entry} if isinstance(entry, dict) else entry))
    return entries


def _parsed_entry(loc: tuple, entry: dict, problem) -> tuple | None:
    """A timeline entry's timing and parameters (engine.parse), or None with its problem reported."""
    if loc[0] == "changes" and isinstance(entry, dict) and entry.get("kind") != CHANGE_KIND:
        problem(loc + ("kind",), "a change has no kind: it is a configuration change",
                "remove `kind:`; a fault goes under faults:")
        return None
    try:
        return engine.parse(entry)
    except TwinError as exc:
        key = next((k for k in entry if f"'{shown_name(k)}'" in exc.message or f" {k}:" in exc.message), "kind")
        problem(loc + (key,), exc.message, exc.hint)
        return None


def _with_entry_problems(error: LabFileError, data: dict, path: Path, source: SourceMap) -> LabFileError:
    """The schema's problems and, beside them, those of every fault and change entry the schema
    left alone (an unknown key, a kind's parameter out of range): the file's problems at once,
    not the entries' only once the rest is mended. An entry the schema or the reader already
    found wrong, or with a value the reader left out, is not looked at again."""
    faults, changes = data.get("faults"), data.get("changes")
    if not isinstance(faults, list) or not isinstance(changes or [], list):
        return error
    told = [p.key for p in error.problems]
    left_out = [dotted(loc) for loc in source.refused]
    found: list[Problem] = []

    def problem(loc: tuple, message: str, hint: str | None = None) -> None:
        found.append(Problem(str(path), source.line(loc), dotted(loc), message, hint))

    for loc, entry in _timeline(faults, changes or []):
        where = dotted(loc)
        if not isinstance(entry, dict) or any(k == where or k.startswith((where + ".", where + "["))
                                              for k in (*told, *left_out)):
            continue
        _parsed_entry(loc, entry, problem)
    if not found:
        return error
    return LabFileError.in_file_order([*error.problems, *found], error.more)


def _faults(spec: ScenarioSpec, fabric: Fabric, problem) -> list[ScheduledFault]:
    faults: list[ScheduledFault] = []
    ids: dict[str, tuple] = {}  # fault or change id -> where it is in the file
    for loc, entry in timeline_entries(spec):
        if (parsed := _parsed_entry(loc, entry, problem)) is None:
            continue
        timing, params = parsed
        try:
            targets = engine.targets(timing, params, fabric)
        except TargetError as exc:
            key = exc.key if exc.key in entry else next(
                (k for k in ("link", "node", "host") if k in entry and str(entry[k]) in exc.message), None)
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
        if timing.id in ids:
            section, index = ids[timing.id]
            problem(loc + ("id",), f"id '{timing.id}' is used twice (also {section}[{index}])",
                    "give each fault and change its own id")
            continue
        ids[timing.id] = loc
        lasts_s = timing.duration_s or spec.duration_s - timing.at_s
        for key, message, hint in get_kind(timing.kind).check(fabric, params, lasts_s):
            problem(loc + (key,), message, hint)
        faults.append(ScheduledFault(timing, params, targets))
    # Planned changes are configuration lines with their own undo: they may overlap each other and
    # faults (a drain, then the ports shut; a link failing during a maintenance).
    spans = [Span(f.timing.id, f.timing.at_s, f.end_s(spec.duration_s), tuple(f.targets)) for f in faults
             if f.timing.kind != CHANGE_KIND]
    for later, earlier, place in sorted(clashes(fabric, spans), key=lambda clash: ids[clash[0].id]):  # file order
        what = "fault" if ids[earlier.id][0] == "faults" else "change"
        problem(ids[later.id] + ("at_s",), f"overlaps {what} '{earlier.id}' on {place} while both "
                "are active", "two faults on one link or node (or a node and one of its links) cannot both "
                "apply: move one in time")
    return sorted(faults, key=lambda f: f.timing.at_s)


def _rank_faults(spec: ScenarioSpec, fabric: Fabric, faults: list[ScheduledFault],
                 workloads: list[PlannedWorkload], problem) -> None:
    """A fault on a training rank (rank_hang, rank_crash, slow_compute) needs a collective workload
    of the scenario with a rank on its host (its NIC, if named): refused when the file loads, not
    found missing at the fault's onset."""
    where = {entry.get("id"): loc for loc, entry in timeline_entries(spec) if isinstance(entry, dict)}
    for fault in faults:
        kind = get_kind(fault.timing.kind)
        if not isinstance(kind, OnRanks):
            continue
        kinds = kind.workload_kinds or COLLECTIVE_KINDS
        host, nic = fault.targets[0], fault.params.nic
        if any(workload.kind in kinds and any(n.host == host and nic in (None, n.ifname)
                                              for n in select_nics(fabric, workload.params.ranks))
               for workload in workloads):
            continue
        place = f"{host}:{nic}" if nic else host
        needed = " or ".join(f"`kind: {k}`" for k in sorted(kinds)) if kind.workload_kinds else "collective"
        problem(where[fault.timing.id] + ("node",), f"{fault.timing.kind} acts on a training rank, and no "
                f"{'train' if kind.workload_kinds else 'collective'} workload of this scenario has a rank on {place}",
                f"add a {needed} workload with ranks there (e.g. `ranks: all`)")


def _detectors(spec: ScenarioSpec, problem) -> list[DetectorSpec]:
    detectors, names = [], {}
    for number, detector in _valid(DetectorSpec, spec.detectors, "detectors", problem,
                                   "e.g. builtin: probe-likelihood, or command: [./tool] (and ready_within_s: 30, "
                                   "at most 300, for a command that needs time to start watching)"):
        builtin = BUILTINS.get(detector.builtin) if detector.builtin else None
        if builtin and builtin.needs and not any(isinstance(w, dict) and builtin.feeds_on(w) for w in spec.workloads):
            problem(("detectors", number, "builtin"), f"{detector.builtin} needs {builtin.needs} workload"
                    if builtin.fed_by else f"{detector.builtin} needs the {builtin.needs} workload",
                    builtin.hint or f"add a workload: - kind: {builtin.needs}")
        if detector.command and not _runnable(detector.command[0]):
            problem(("detectors", number, "command"), f"command {detector.command[0]!r} is not found",
                    "a program on PATH, or a path from the folder `twin run` starts in")
        label = detector.label(number)
        if label in names:
            problem(("detectors", number), f"two detectors are called {label!r} (also detectors[{names[label]}])",
                    "give each its own `name:`")
        names[label] = number
        detectors.append(detector)
    return detectors


def _expectations(spec: ScenarioSpec, detectors: list[DetectorSpec], problem) -> list[Expectation]:
    fault_ids = {_text(f, "id") for f in (*spec.faults, *spec.changes)} - {None}
    names = workload_names(spec.workloads)
    expectations = []
    for number, expectation in _valid(Expectation, spec.expect, "expect", problem, "see docs/formats.md, expect"):
        loc, value = ("expect", number, expectation.kind), expectation.value
        refers_to = EXPECTATIONS.get(expectation.kind).refers_to
        if "fault" in refers_to and value.fault not in fault_ids:
            problem(loc, f"no fault with id {value.fault!r}", f"fault ids: {', '.join(sorted(fault_ids)) or 'none'}")
        if "detector" in refers_to and not detectors:
            problem(loc, "no detector to grade", "add detectors: - builtin: probe-likelihood")
        workload = getattr(value, "workload", None)
        if "workload" in refers_to and workload is not None and workload not in names:
            problem(loc, f"no workload {workload!r}", f"workloads: {', '.join(sorted(names)) or 'none'}")
        elif expectation.kind in GRADED_KINDS:
            fits = GRADED_KINDS[expectation.kind]
            named = [names[workload]] if workload is not None else list(names.values())
            if not any(kind in fits for kind in named):
                problem(loc, f"{expectation.kind} can never pass: "
                        + (f"{workload!r} is a {names[workload]} workload" if workload else "no workload it grades"),
                        f"{expectation.kind} grades {', '.join(sorted(fits))} workloads")
        expectations.append(expectation)
    return expectations


def _runnable(program: str) -> bool:
    if "/" in program:
        return os.access(program, os.X_OK) and Path(program).is_file()
    return shutil.which(program) is not None


def _valid(model, entries: list, section: str, problem, hint: str):
    """(index, validated entry) for each entry that validates; a problem for each that does not."""
    for number, entry in enumerate(entries):
        try:
            yield number, model.model_validate(entry)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(x) for x in error["loc"])
            if error["type"] == "extra_forbidden" and len(error["loc"]) == 1:
                guess = closest(str(error["loc"][0]), sorted(model.model_fields))
                problem((section, number, error["loc"][0]), "unknown key", key_note(error["loc"][0]) +
                        (f"did you mean '{guess}'? " if guess else "")
                        + f"valid: {', '.join(sorted(model.model_fields))}")
                continue
            problem((section, number), (f"{where}: " if where else "") +
                    error["msg"].removeprefix("Value error, "), hint)
