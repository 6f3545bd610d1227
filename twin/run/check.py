"""`twin check`: a lab or scenario file validated completely, exactly as `twin run` and `twin e2e`
validate it before anything starts (a scenario: its lab file, the built model, every fault
target, workload, detector and expectation), without touching the machine."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from twin.errors import LabFileError, Problem, TwinError
from twin.lab.files import open_lab
from twin.run.plan import load_scenario
from twin.spec.yamlsrc import read_yaml


@dataclass
class Checked:
    path: Path
    kind: str  # "lab" | "scenario" | "file" (not readable as either)
    problems: list[Problem] = field(default_factory=list)
    summary: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"file": str(self.path), "kind": self.kind, "ok": self.ok, "summary": self.summary,
                "problems": [{"file": p.path, "line": p.line, "key": p.key, "message": p.message, "hint": p.hint}
                             for p in self.problems]}


def kind_of(data) -> str:
    """A lab file describes a fabric; anything else is read as a scenario."""
    return "lab" if "fabric" in data else "scenario"


def check(path: Path) -> Checked:
    try:
        data, _source = read_yaml(path)
    except LabFileError as exc:
        return Checked(path, "file", exc.problems)
    kind = kind_of(data)
    try:
        if kind == "lab":
            _lab, fabric = open_lab(str(path))
            summary = f"{len(fabric.nodes)} nodes, {len(fabric.links)} links"
        else:
            plan = load_scenario(path)
            summary = (f"lab {plan.fabric.name}, {len(plan.workloads)} workloads, {len(plan.faults)} faults, "
                       f"{len(plan.detectors)} detectors, {len(plan.expectations)} expectations")
    except LabFileError as exc:
        return Checked(path, kind, exc.problems)
    except TwinError as exc:  # e.g. a lab the address plan cannot hold
        return Checked(path, kind, [Problem(str(path), None, "", exc.message, exc.hint)])
    return Checked(path, kind, summary=summary)
