"""Every bad lab file is paired with the exact message it must produce (<case>.expected)."""

from pathlib import Path

import pytest

from twin.errors import LabFileError
from twin.lab import runtime
from twin.model.build import build_fabric
from twin.spec.labfile import load_lab

CASES = Path(__file__).resolve().parent.parent / "cases" / "labfile"
FILES = sorted(CASES.glob("*.yaml"))


@pytest.mark.parametrize("case", FILES, ids=[f.stem for f in FILES])
def test_error_message(case, monkeypatch):
    monkeypatch.chdir(CASES)
    with pytest.raises(LabFileError) as info:  # as `twin check` validates it: loaded, then built
        build_fabric(load_lab(Path(case.name), runtime.names()))
    expected = case.with_suffix(".expected").read_text()
    assert info.value.message + "\n" == expected


def test_every_case_has_an_expectation():
    assert FILES, "no error cases found"
    for case in FILES:
        assert case.with_suffix(".expected").is_file(), f"{case.name} has no .expected file"


def test_problems_carry_line_numbers(monkeypatch):
    monkeypatch.chdir(CASES)
    with pytest.raises(LabFileError) as info:
        load_lab(Path("several_problems.yaml"), runtime.names())
    lines = sorted(p.line for p in info.value.problems)
    assert lines == [1, 4, 7, 10, 12]
