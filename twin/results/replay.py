"""Run a detector again on what a results folder recorded, offline: the probe mesh's intervals
(probes.jsonl) through a probe localizer, or the job's QP and connection states (transport.jsonl,
kept when transport-state ran) through transport-state, graded against the run's faults exactly
as the run graded its live verdicts. A detector change can then be compared with the old one on
the same evidence, in seconds instead of a drill.

    twin detect replay RESULTS_DIR... [--detector probe-localizer]

A replayed verdict is timed when its interval could first be counted live: the interval's end
plus the agents' grace. A live run times it when the runner received it, which on a busy machine
can be later; replay measures the detector, not the machine. Pause evidence (the PFC counters
the live localizer also reads) is not in probes.jsonl and is not replayed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from twin.detect import transport_state
from twin.detect.builtins import BUILTINS
from twin.detect.localizer import DETECTOR
from twin.detect.verdicts import Verdict
from twin.errors import TwinError
from twin.events import read_jsonl
from twin.probes.mesh import GRACE_S, PROBES_FILE, PathSample
from twin.results import record as results_record
from twin.results.analysis import analyse
from twin.results.grading import detectors as grade_detectors
from twin.results.report import DetectorScore
from twin.workloads.probes import ProbesParams


def replayable() -> list[str]:
    """Built-in detectors whose evidence the results keep (`BuiltinDetector.evidence`): the probe
    detectors' probes.jsonl, transport-state's transport.jsonl."""
    return [name for name in BUILTINS.names() if BUILTINS.get(name).evidence]


@dataclass
class Replay:
    folder: Path
    detector: str
    intervals: int
    faults: int  # faults the run injected (graded ones)
    live: DetectorScore | None  # what the run graded live, when it ran this detector
    replayed: DetectorScore
    damaged: list[str] = field(default_factory=list)  # what of the folder could not be read back


def replay(folder: Path, detector: str = DETECTOR) -> Replay:
    if detector not in replayable():
        BUILTINS.get(detector)  # an unknown name: refused with the names it could be
        raise TwinError(f"{detector} does not read probe or transport evidence: it cannot be replayed",
                        hint=f"replayable: {', '.join(replayable())}")
    run = results_record.load(folder)
    read = {PROBES_FILE: _probe_verdicts, transport_state.TRANSPORT_FILE: _transport_verdicts}
    intervals, verdicts, damaged, classes = read[BUILTINS.get(detector).evidence](run, folder, detector)
    # What the detector's traffic left ambiguous, as the replay counted it (a run recorded by an
    # older version counted it another way), in place of what the live run recorded.
    records = [r for r in run.records if r["kind"] != "verdict"
               and not (classes is not None and r["kind"] == "detector" and r.get("detector") == detector)]
    records += [{"kind": "detector", "op": "ambiguous", "detector": detector, **c} for c in classes or []]
    records += [{"kind": "verdict", "t": v.t, "detector": detector, **v.fields()} for v in verdicts]
    report = analyse(run)
    scores = grade_detectors(records, report.faults, run.targets, run.record.duration_s)
    empty = DetectorScore(verdicts=0, right=0, wrong=0, precision=None,
                          recall=0.0 if report.faults else None, detect_s={})
    return Replay(folder, detector, intervals, len(report.faults), report.detectors.get(detector),
                  scores.get(detector, empty), run.damaged + damaged)


def _probe_verdicts(run, folder: Path, detector: str) -> tuple[int, list[Verdict], list[str], None]:
    """The probe localizer's verdicts on probes.jsonl's intervals: (intervals, verdicts, damaged rows,
    None: the probe plan's ambiguous classes are the run's own, recorded with its selections)."""
    probes_file = folder / PROBES_FILE
    if not probes_file.is_file():
        raise TwinError(f"{folder} has no {PROBES_FILE}: the run had no probes workload",
                        hint="replay needs a run with `kind: probes` among its workloads")
    probes = next((w for w in run.record.workloads if w.get("kind") == "probes"), {})
    report_s = probes.get("report_ms", ProbesParams.model_fields["report_ms"].default) / 1000
    localizer = BUILTINS.get(detector).localizer(run.fabric, report_s)
    intervals, verdicts, rows = 0, [], read_jsonl(probes_file, ("t", "samples"))
    for interval in rows[0]:
        try:
            samples = [PathSample(**{**s, "links": tuple(s["links"])}) for s in interval["samples"]]
        except (TypeError, KeyError) as exc:
            raise TwinError(f"{probes_file}: an interval at t={interval['t']} is not a probe interval ({exc})",
                            hint="the file was written by another version") from None
        intervals += 1
        counted_at = interval["t"] + report_s + GRACE_S  # scenarios do not set the grace
        verdicts += localizer.observe(counted_at, samples)
    return intervals, verdicts, [str(rows[1])] if rows[1] else [], None


def _transport_verdicts(run, folder: Path, _detector: str) -> tuple[int, list[Verdict], list[str], list[dict]]:
    """transport-state's verdicts on transport.jsonl's rows: (rows, verdicts, damaged rows, what its
    QPs left ambiguous as it changed)."""
    path = folder / transport_state.TRANSPORT_FILE
    if not path.is_file():
        raise TwinError(f"{folder} has no {transport_state.TRANSPORT_FILE}: the run did not run transport-state",
                        hint="replay needs a run with `builtin: transport-state` among its detectors")
    rows, bad = read_jsonl(path, ("t", "nic", "qps"))
    collectives = [w for w in run.record.workloads if "transport" in w]
    silent = max((transport_state.silent_s(w) for w in collectives), default=0.0)
    try:
        rows.sort(key=lambda row: row["t"])
        classes: list[dict] = []
        verdicts = list(transport_state.replayed(run.fabric, rows, silent, classes))
    except (TypeError, KeyError, AttributeError) as exc:
        raise TwinError(f"{path}: a row is not a QP state ({exc!r})",
                        hint="the file was written by another version") from None
    return len(rows), verdicts, [str(bad)] if bad else [], classes
