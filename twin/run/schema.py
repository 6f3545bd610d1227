"""JSON Schemas of the two file kinds, generated from the same models that validate them, for
editors (the YAML language server validates as the user types; docs/formats.md). The scenario
schema spells out every fault, workload, detector and expectation kind from the registries."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from twin.detect.specs import DetectorSpec
from twin.faults.base import Timing
from twin.faults.registry import FAULTS
from twin.results.expectations import Expectation
from twin.spec.labfile import LabSpec
from twin.spec.scenario import ScenarioSpec
from twin.workloads.registry import WORKLOADS

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _inline(model: type[BaseModel]) -> dict[str, Any]:
    """A model's schema with its own definitions moved to the top (collected by the caller)."""
    return model.model_json_schema(ref_template="#/$defs/{model}")


def _entry(kind: str, params: type[BaseModel], common: type[BaseModel] | None, defs: dict) -> dict:
    schema = _inline(params)
    defs.update(schema.pop("$defs", {}))
    properties = {"kind": {"const": kind}}
    required = ["kind"]
    if common is not None:
        shared = _inline(common)
        defs.update(shared.pop("$defs", {}))
        properties |= {k: v for k, v in shared["properties"].items() if k != "kind"}
        required += [k for k in shared.get("required", []) if k != "kind"]
    properties |= schema.get("properties", {})
    required += schema.get("required", [])
    return {"type": "object", "title": kind, "description": schema.get("description", ""),
            "properties": properties, "required": sorted(set(required)), "additionalProperties": False}


def lab_schema() -> dict[str, Any]:
    return {**_inline(LabSpec), "$schema": DIALECT, "title": "fabric-twin lab file"}


def scenario_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    top = _inline(ScenarioSpec)
    defs.update(top.pop("$defs", {}))
    faults = [_entry(name, kind.params, Timing, defs) for name, kind in FAULTS.items()]
    workloads = [_entry(name, kind.params, None, defs) for name, kind in WORKLOADS.items()]
    detector, expectation = _inline(DetectorSpec), _inline(Expectation)
    for schema in (detector, expectation):
        defs.update(schema.pop("$defs", {}))
    top["properties"]["faults"] = {"type": "array", "items": {"oneOf": faults}}
    top["properties"]["workloads"] = {"type": "array", "items": {"oneOf": workloads}}
    top["properties"]["detectors"] = {"type": "array", "items": detector}
    top["properties"]["expect"] = {"type": "array", "items": {**expectation, "minProperties": 1,
                                                               "maxProperties": 1}}
    return {**top, "$schema": DIALECT, "title": "fabric-twin scenario file", "$defs": defs}


SCHEMAS = {"lab": lab_schema, "scenario": scenario_schema}
