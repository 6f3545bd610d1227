"""docs/formats.md is the file contract: it names every key, kind and expectation the code
accepts, so a key added to a schema without its documentation fails here."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from twin.detect.specs import DetectorSpec
from twin.faults.base import COMMON_KEYS
from twin.faults.registry import FAULTS
from twin.results.expectations import EXPECTATIONS
from twin.results.record import RunRecord
from twin.results.report import Report
from twin.spec.labfile import LabSpec
from twin.spec.scenario import ScenarioSpec
from twin.workloads.registry import WORKLOADS

DOC = Path(__file__).resolve().parents[2] / "docs" / "formats.md"


def _keys(model: type[BaseModel]) -> set[str]:
    """Every field name of a model and of the models nested in it."""
    found = set()
    for name, field in model.model_fields.items():
        found.add(name)
        nested = field.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            found |= _keys(nested)
    return found


def _undocumented(names) -> list[str]:
    text = DOC.read_text()
    return sorted(n for n in set(names) if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text))


def test_every_lab_and_scenario_key_is_documented():
    assert _undocumented(_keys(LabSpec) | _keys(ScenarioSpec) | _keys(DetectorSpec)) == []


def test_every_fault_kind_and_its_keys_are_documented():
    keys = set(COMMON_KEYS) | {f for _, kind in FAULTS.items() for f in kind.params.model_fields}
    assert _undocumented(FAULTS.names()) == [] and _undocumented(keys) == []


def test_every_workload_kind_and_its_keys_are_documented():
    keys = {f for _, kind in WORKLOADS.items() for f in kind.params.model_fields}
    assert _undocumented(WORKLOADS.names()) == [] and _undocumented(keys) == []


def test_every_expectation_is_documented():
    assert _undocumented(EXPECTATIONS.names()) == []


def test_the_results_folder_is_documented():
    assert _undocumented(RunRecord.model_fields) == []
    assert _undocumented(Report.model_fields) == []


def test_the_check_sees_a_missing_key():
    assert _undocumented(["no_such_key_anywhere"]) == ["no_such_key_anywhere"]
