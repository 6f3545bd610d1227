"""`twin check`: a lab or scenario file validated completely, exactly as `twin run` and `twin e2e`
validate it before anything starts (a scenario: its lab file, the built model, every fault
target, workload, detector and expectation), without touching the machine."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from twin.errors import MAX_PROBLEMS_LISTED, LabFileError, Problem, TwinError, closest
from twin.lab import runtime
from twin.model.build import build_fabric
from twin.run.plan import load_scenario
from twin.spec.labfile import LabSpec, load_lab
from twin.spec.scenario import ScenarioSpec
from twin.spec.yamlsrc import read_yaml
from twin.text import clipped


@dataclass
class Checked:
    path: Path
    kind: str  # "lab" | "scenario" | "file" (not readable as either) | "error" (a bug in twin)
    problems: list[Problem] = field(default_factory=list)
    summary: str = ""
    more: int = 0  # problems found beyond those in `problems`

    @property
    def count(self) -> int:
        return len(self.problems) + self.more

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"file": str(self.path), "kind": self.kind, "ok": self.ok, "summary": self.summary,
                "problems": [{"file": p.path, "line": p.line, "key": p.key, "message": p.message, "hint": p.hint}
                             for p in self.problems[:MAX_PROBLEMS_LISTED]],
                "more_problems": max(0, self.count - MAX_PROBLEMS_LISTED)}


KEYS_WEIGHED = 50  # a file of 50,000 keys is judged by its first ones (each costs a fuzzy match)
LAB_KEYS = frozenset(LabSpec.model_fields) - {"name"}
SCENARIO_KEYS = frozenset(ScenarioSpec.model_fields) - {"name"}


def kind_of(data) -> str:
    """Which schema a document is closer to, by its top-level keys: a lab describes a fabric, a
    scenario what runs on one. A key counts for a schema when it is one of its keys or close to one
    (`fabrik:` or a look-alike `fаbric` is a lab file with a typo, not a scenario with an unknown key)."""
    top = list(data)[:KEYS_WEIGHED]

    def weight(keys: frozenset[str]) -> int:
        return sum(1 for key in top if key in keys or closest(key, sorted(keys)) is not None)
    return "lab" if weight(LAB_KEYS) > weight(SCENARIO_KEYS) else "scenario"


def check(path: Path, raw: bytes | None = None) -> Checked:
    """Everything wrong with one file (`raw`: its bytes, read from standard input); never raises
    for what the file holds. A bug in twin becomes a problem of kind "error"."""
    try:
        return _check(path, raw)
    except Exception as exc:  # noqa: BLE001 (one file's bug must not hide the other files' results)
        return Checked(path, "error", [Problem(str(path), None, "", f"internal error ({type(exc).__name__}): "
                                               f"{clipped(str(exc), 200)}",
                                               "a bug in twin: rerun with --debug for the traceback and report it")])


def _check(path: Path, raw: bytes | None) -> Checked:
    try:
        parsed = read_yaml(path, raw)  # once: the loaders below take it as it is
    except LabFileError as exc:
        return Checked(path, "file", exc.problems, more=exc.more)
    kind = kind_of(parsed[0])
    try:
        if kind == "lab":
            lab = load_lab(path, runtime.names(), parsed)
            fabric = build_fabric(lab)
            summary = f"{len(fabric.nodes)} nodes, {len(fabric.links)} links"
        else:
            plan = load_scenario(path, parsed=parsed)
            summary = (f"lab {plan.fabric.name}, {len(plan.workloads)} workloads, {len(plan.faults)} faults, "
                       f"{len(plan.detectors)} detectors, {len(plan.expectations)} expectations")
    except LabFileError as exc:
        return Checked(path, kind, exc.problems, more=exc.more)
    except TwinError as exc:  # e.g. a lab the address plan cannot hold
        return Checked(path, kind, [Problem(str(path), None, "", exc.message, exc.hint)])
    return Checked(path, kind, summary=summary)
