"""Every benchmark script still imports: `make bench` is not run by CI, and a module moved or
renamed under it (lab/'s rooms, 2026-11-29) broke three of them silently."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_a_benchmark_script_imports(script, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setattr(sys, "argv", [script])
    spec = importlib.util.spec_from_file_location(f"bench_{Path(script).stem}", BENCH / script)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # main() runs only as __main__
