"""`twin check` and `twin schema`: the check is the run's own validation; the JSON Schemas accept
every shipped file and refuse what the loader refuses at the key level."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from ruamel.yaml import YAML

from twin.run.check import check
from twin.run.schema import lab_schema, scenario_schema

ROOT = Path(__file__).resolve().parents[2]
LABS = sorted((ROOT / "labs").glob("*.yaml"))
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
BAD = sorted((ROOT / "tests" / "cases").glob("*/*.yaml"))


def _plain(path: Path):
    return YAML(typ="safe").load(path.read_text())


@pytest.mark.parametrize("path", LABS + SCENARIOS, ids=lambda p: p.name)
def test_shipped_files_check_and_fit_their_schema(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = check(path)
    assert result.ok, result.problems
    schema = lab_schema() if result.kind == "lab" else scenario_schema()
    errors = list(Draft202012Validator(schema).iter_errors(_plain(path)))
    assert not errors, [e.message for e in errors]


@pytest.mark.parametrize("path", BAD, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_broken_case_fails_the_check_with_a_place(path, monkeypatch):
    monkeypatch.chdir(path.parent)
    result = check(Path(path.name))
    assert not result.ok
    assert all(p.message for p in result.problems)
    assert any(p.line for p in result.problems), result.problems


def test_the_schemas_are_valid_and_refuse_unknown_keys():
    for schema in (lab_schema(), scenario_schema()):
        Draft202012Validator.check_schema(schema)
    doc = _plain(ROOT / "scenarios" / "silent-drop.yaml")
    validator = Draft202012Validator(scenario_schema())
    typo = copy.deepcopy(doc)
    typo["faults"][0]["los_pct"] = typo["faults"][0].pop("loss_pct")
    assert list(validator.iter_errors(typo))
    unknown = copy.deepcopy(doc)
    unknown["faults"][0]["kind"] = "meteor_strike"
    assert list(validator.iter_errors(unknown))
    lab = _plain(ROOT / "labs" / "rail4.yaml")
    lab["fabric"]["tiers"] = 4
    assert list(Draft202012Validator(lab_schema()).iter_errors(lab))
