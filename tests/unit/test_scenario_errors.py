"""Every bad scenario file is paired with the exact message it must produce (<case>.expected),
and loading one touches nothing (these run without root)."""

from pathlib import Path

import pytest

from twin.errors import LabFileError
from twin.run.plan import load_scenario

CASES = Path(__file__).resolve().parent.parent / "cases" / "scenario"
FILES = sorted(p for p in CASES.glob("*.yaml") if p.name != "broken-lab.yaml")


@pytest.mark.parametrize("case", FILES, ids=[f.stem for f in FILES])
def test_error_message(case, monkeypatch):
    monkeypatch.chdir(CASES)
    with pytest.raises(LabFileError) as info:
        load_scenario(Path(case.name))
    assert info.value.message + "\n" == case.with_suffix(".expected").read_text()


def test_shipped_scenarios_validate():
    for path in sorted((CASES.parents[2] / "scenarios").glob("*.yaml")):
        scenario = load_scenario(path)
        # a drill without a fault exists only to count a detector's false positives
        assert scenario.faults or scenario.detectors, f"{path.name} injects no fault and grades no detector"
