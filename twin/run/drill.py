"""`twin e2e`: the fault drill. Runs scenarios one after another (each brings its lab up and
down) and grades every expectation; the drill fails when any scenario does.

`quick` shortens the drill for CI without changing what is measured (spec/quick.py), and the
scenarios of one lab share one bring-up (the lab must converge again between them: every fault
is reversible, which this also exercises).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from twin.errors import TwinError
from twin.lab import deploy
from twin.lab.runtime import names
from twin.results.publish import publish
from twin.results.report import Report
from twin.run import runner
from twin.spec.labfile import load_lab


@dataclass
class DrillResult:
    scenario: str
    passed: bool
    report: Report | None = None
    directory: Path | None = None
    error: str | None = None


def scenario_files(refs: Iterable[str], folder: Path = Path("scenarios")) -> list[Path]:
    """Files or names from scenarios/; none given: every scenario there."""
    refs = list(refs)
    if not refs:
        return sorted(folder.glob("*.yaml"))
    return [Path(r) if Path(r).is_file() else folder / f"{r}.yaml" for r in refs]


def run_drill(scenarios: list, results: Path, quick: bool, progress: Callable[[], object],
              started: Callable[[int, object], None], finished: Callable[[object, DrillResult],
                                                                         None]) -> list[DrillResult]:
    """Run each scenario and grade it. `progress()` gives a context manager yielding a Progress;
    `started(number, scenario)` and `finished(scenario, result)` report as the drill goes."""
    outcomes, number = [], 0
    groups = groupby(sorted(scenarios, key=lambda s: s.fabric.name), key=lambda s: s.fabric.name) if quick \
        else ((None, [s]) for s in scenarios)
    for _lab, group in groups:
        group = list(group)
        with _shared_lab(group[0] if quick else None, progress) as shared:
            for scenario in group:
                number += 1
                started(number, scenario)
                try:
                    with progress() as bar:
                        if shared:
                            deploy.wait_converged(shared, bar)
                        directory = runner.run(scenario, results, keep=bool(shared), progress=bar)
                except TwinError as exc:
                    outcome = DrillResult(scenario.spec.name, False, error=exc.message)
                else:
                    report = publish(directory)
                    outcome = DrillResult(scenario.spec.name, report.passed, report, directory)
                outcomes.append(outcome)
                finished(scenario, outcome)
    return outcomes


@contextmanager
def _shared_lab(scenario, progress: Callable[[], object]):
    """The scenario's lab up for a group of scenarios (None: each run brings up its own)."""
    if scenario is None:
        yield None
        return
    with progress() as bar:
        lab = deploy.up(load_lab(scenario.lab_path, names()), scenario.fabric, bar)
    try:
        yield lab
    finally:
        with progress() as bar:
            deploy.down(scenario.fabric.name, bar)
