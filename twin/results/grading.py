"""Scoring detectors: every verdict counted right or wrong against the injected ground truth.

A verdict is right when it names a link or node of a fault active at that moment (or within
LATE_S after its clear); the time to detect counts from the fault's onset (when its apply has
finished) to the first right verdict, as the runner received it. Only verdicts received while
the scenario ran count: those after its end (the workloads and agents stopping, teardown) are
reported as `after_end` and graded neither right nor wrong. A set verdict (candidates the probes
could not tell apart) is right when it holds the fault and lies within one of the classes the
run's probe plan left ambiguous (recorded with the probes workload's start and each selection),
or, for a detector that reads other traffic, one its traffic left ambiguous (transport-state:
links crossed by exactly the same QPs, recorded as `detector` events as the QPs change); a fault
it names counts as localized to its number of candidates. Expectations are graded in
results/expectations.py, from these scores.
"""

from __future__ import annotations

from twin.detect.verdicts import Verdict, names_fault
from twin.results.report import DetectorScore, FaultWindow

LATE_S = 3.0  # a verdict this soon after a clear still refers to that fault


def _verdicts(records: list[dict]) -> list[Verdict]:
    return [Verdict.from_record(r) for r in records if r["kind"] == "verdict"]


def ambiguous_classes(records: list[dict], detector: str | None = None) -> list[set[str]]:
    """The link and switch names the run's probe plans could not tell apart, class by class (the
    probes workload records its plan's at start and at each new selection), and those the traffic
    `detector` reads could not (its own `detector` records)."""
    return [set(group) for r in records
            if r["kind"] in ("workload", "probe_selection") or (r["kind"] == "detector" and r["detector"] == detector)
            for group in r.get("ambiguous") or []]


def scenario_end(records: list[dict], duration_s: float) -> float:
    """When the scenario stopped running: its duration, or the moment it was interrupted."""
    interrupted = [r["t"] for r in records if r["kind"] == "scenario" and r.get("op") == "interrupted"]
    return min([duration_s, *interrupted])


def faults_named(verdict: Verdict, faults: list[FaultWindow], targets: dict[str, list[str]],
                 duration_s: float, ambiguous: list[set[str]] | None = None) -> list[FaultWindow]:
    """The faults a verdict names while they are active (or within LATE_S of their clear): it is
    right when there is one."""
    return [f for f in faults if f.active(duration_s)[0] <= verdict.t <= f.active(duration_s)[1] + LATE_S
            and names_fault(verdict, targets.get(f.id, []), ambiguous)]


def graded_verdicts(records: list[dict], faults: list[FaultWindow], targets: dict[str, list[str]],
                    duration_s: float) -> list[tuple[Verdict, bool]]:
    """Every verdict received while the scenario ran, with whether it was right."""
    end_s = scenario_end(records, duration_s)
    ambiguous = {name: ambiguous_classes(records, name) for name in {v.detector for v in _verdicts(records)}}
    return [(v, bool(faults_named(v, faults, targets, duration_s, ambiguous[v.detector])))
            for v in _verdicts(records) if v.t <= end_s]


def detectors(records: list[dict], faults: list[FaultWindow], targets: dict[str, list[str]],
              duration_s: float) -> dict[str, DetectorScore]:
    """Per detector: verdicts, right, wrong, precision, recall, time to detect each fault."""
    verdicts = _verdicts(records)
    end_s = scenario_end(records, duration_s)
    out = {}
    for name in sorted({v.detector for v in verdicts} | {r["detector"] for r in records if r["kind"] == "detector"}):
        ambiguous = ambiguous_classes(records, name)
        everything = [v for v in verdicts if v.detector == name]
        mine = [v for v in everything if v.t <= end_s]
        right, detected, localized = 0, {}, {}
        for v in mine:
            hit = faults_named(v, faults, targets, duration_s, ambiguous)
            right += bool(hit)
            for f in hit:
                detected.setdefault(f.id, round(max(0.0, v.t - f.onset(duration_s)), 3))
                localized[f.id] = min(localized.get(f.id, len(v.names)), len(v.names))
        out[name] = DetectorScore(verdicts=len(mine), right=right, wrong=len(mine) - right,
                                  precision=round(right / len(mine), 3) if mine else None,
                                  recall=round(len(detected) / len(faults), 3) if faults else None,
                                  detect_s=detected, after_end=len(everything) - len(mine),
                                  candidates={k: n for k, n in localized.items() if n > 1})
    return out
