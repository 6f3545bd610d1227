"""`twin e2e`: the fault drill. Runs scenarios one after another (each brings its lab up and
down) and grades every expectation; the drill fails when any scenario does.

`quick` shortens the drill for CI without changing what is measured: the lead-in before the
first fault becomes QUICK_LEAD_S (all faults move back together, their durations and the
expectations unchanged), the run ends QUICK_TAIL_S after the last clear, a scenario without
faults runs at most QUICK_PLAIN_S, and the scenarios of one lab share one bring-up (the lab
must converge again between them: every fault is reversible, which this also exercises).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from twin.lab import deploy
from twin.errors import TwinError
from twin.spec.labfile import load_lab
from twin.lab.runtime import get_runtime, names

QUICK_LEAD_S = 3.0
QUICK_TAIL_S = 3.0
QUICK_PLAIN_S = 30.0


def shorten(data: dict) -> None:
    """Rewrite a scenario document's timeline in place (before validation; bad values are left
    for validation to report)."""
    duration = data.get("duration_s")
    faults = [f for f in data.get("faults") or [] if isinstance(f, dict)]
    if not isinstance(duration, (int, float)) or not all(isinstance(f.get("at_s"), (int, float)) for f in faults):
        return
    if not faults:
        data["duration_s"] = min(duration, QUICK_PLAIN_S)
        return
    shift = max(0.0, min(f["at_s"] for f in faults) - QUICK_LEAD_S)
    for f in faults:
        f["at_s"] -= shift
    ends = [f["at_s"] + f["duration_s"] if isinstance(f.get("duration_s"), (int, float)) else None for f in faults]
    duration -= shift
    data["duration_s"] = duration if None in ends else min(duration, max(ends) + QUICK_TAIL_S)


@dataclass
class DrillResult:
    scenario: str
    passed: bool
    summary: dict | None = None  # report.json's content
    directory: Path | None = None
    error: str | None = None


def scenario_files(refs: Iterable[str], folder: Path = Path("scenarios")) -> list[Path]:
    """Files or names from scenarios/; none given: every scenario there."""
    refs = list(refs)
    if not refs:
        return sorted(folder.glob("*.yaml"))
    return [Path(r) if Path(r).is_file() else folder / f"{r}.yaml" for r in refs]


def run_drill(scenarios: list, results: Path, quick: bool, progress: Callable[[], object],
              started: Callable[[int, object], None], finished: Callable[[object, DrillResult], None]) -> list[DrillResult]:
    """Run each scenario and grade it. `progress()` gives a context manager yielding a Progress;
    `started(number, scenario)` and `finished(scenario, result)` report as the drill goes."""
    from twin.results import report as reporting
    from twin.run import runner
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
                            deploy.wait_converged(get_runtime(shared.runtime, shared.lab), shared,
                                                  scenario.fabric, bar)
                        result = runner.run(scenario, results, keep=bool(shared), progress=bar)
                except TwinError as exc:
                    outcome = DrillResult(scenario.spec.name, False, error=exc.message)
                else:
                    summary = reporting.write_all(result)
                    outcome = DrillResult(scenario.spec.name, summary["passed"], summary, result.directory)
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
        state = deploy.up(load_lab(scenario.lab_path, names()), scenario.fabric, bar)
    try:
        yield state
    finally:
        with progress() as bar:
            deploy.down(scenario.fabric.name, bar)
